"""A text/event-stream reader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional


@dataclass
class ServerSentEvent:
    """One event: its name ("message" when it named none), its data lines
    joined with newlines, and its id field when it had one."""

    event: str
    data: str
    id: Optional[str] = None


def parse_sse(read: Callable[[], bytes], max_event_bytes: int = 16 << 20) -> Iterator[ServerSentEvent]:
    """Reads events from read (a function returning the next bytes, b"" at
    the end): "event:", "data:" and "id:" fields, comments (": ping") and
    other fields skipped, an event dispatched at a blank line (one with no
    data is skipped). Lines end at "\\n", "\\r\\n" or "\\r". An event larger
    than max_event_bytes is an error (ValueError)."""
    buf = b""
    event, data, size, ev_id, has_data = "", [], 0, None, False  # type: str, List[str], int, Optional[str], bool
    done = False
    while not done:
        chunk = read()
        if not chunk:
            done = True
        buf += chunk
        while True:
            i_n, i_r = buf.find(b"\n"), buf.find(b"\r")
            if i_n < 0 and i_r < 0:
                break
            if i_r >= 0 and (i_n < 0 or i_r < i_n):
                # A "\r" at the very end may be the first half of "\r\n".
                if i_r == len(buf) - 1 and not done:
                    break
                i, end = i_r, (i_r + 2 if buf[i_r + 1:i_r + 2] == b"\n" else i_r + 1)
            else:
                i, end = i_n, i_n + 1
            line = buf[:i].decode("utf-8", "replace")
            buf = buf[end:]
            if line == "":
                if has_data:
                    yield ServerSentEvent(event or "message", "\n".join(data), ev_id)
                event, data, size, has_data = "", [], 0, False
                continue
            if line.startswith(":"):
                continue
            field, sep, value = line.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if field == "event":
                event = value
            elif field == "data":
                size += len(value) + 1
                if size > max_event_bytes:
                    raise ValueError("makerfleet: an event is larger than %d bytes" % max_event_bytes)
                data.append(value)
                has_data = True
            elif field == "id" and "\0" not in value:
                ev_id = value
        if len(buf) > max_event_bytes:
            raise ValueError("makerfleet: an event line is longer than %d bytes" % max_event_bytes)
    # A last event without its blank line is incomplete and dropped.
