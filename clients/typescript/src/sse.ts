/** ServerSentEvent is one event of a text/event-stream. */
export interface ServerSentEvent {
  /** event is the event's name ("message" when it named none). */
  event: string;
  /** data is the event's data lines joined with newlines. */
  data: string;
  /** id is the event's id field, when it had one. */
  id?: string;
}

/**
 * parseSSE reads a text/event-stream: "event:", "data:" and "id:" fields
 * (data lines joined with newlines), comments (": ping") and other fields
 * skipped, an event dispatched at a blank line (one with no data is
 * skipped). Lines end at "\n", "\r\n" or "\r". An event larger than
 * maxEventBytes characters is an error. It ends when the stream does.
 */
export async function* parseSSE(
  body: ReadableStream<Uint8Array>,
  maxEventBytes: number,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let event = "";
  let data: string[] = [];
  let size = 0;
  let id: string | undefined;
  let hasData = false;
  // line handles one line; it returns an event to dispatch, if any.
  const line = (l: string): ServerSentEvent | undefined => {
    if (l === "") {
      const out = hasData ? { event: event || "message", data: data.join("\n"), ...(id !== undefined ? { id } : {}) } : undefined;
      event = "";
      data = [];
      size = 0;
      hasData = false;
      return out;
    }
    if (l.startsWith(":")) return undefined;
    const i = l.indexOf(":");
    const field = i < 0 ? l : l.slice(0, i);
    let value = i < 0 ? "" : l.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        event = value;
        break;
      case "data":
        size += value.length + 1;
        if (size > maxEventBytes) throw new Error(`makerfleet: an event is larger than ${maxEventBytes} bytes`);
        data.push(value);
        hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) id = value;
        break;
    }
    return undefined;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        if (m === null) break;
        // A "\r" at the very end may be the first half of "\r\n".
        if (m[0] === "\r" && m.index === buf.length - 1 && !done) break;
        const ev = line(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
        if (ev) yield ev;
      }
      if (buf.length > maxEventBytes) throw new Error(`makerfleet: an event line is longer than ${maxEventBytes} bytes`);
      if (done) {
        // A last line without its end, and no blank line after: the
        // event is incomplete and is dropped, as the format says.
        return;
      }
    }
  } finally {
    // Stops the download when the caller stops early (break, throw).
    await reader.cancel().catch(() => undefined);
  }
}
