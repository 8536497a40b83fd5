"""makerfleet: a client of the makerfleet API (maker serve), standard
library only. Jobs, event streams, batches, tasks, usage and dead letters;
error answers as MakerAPIError (RFC 9457 problems); the webhook signing
secret and deliveries, and Standard Webhooks verification (verify_webhook)."""

from .client import BATCH_ENDED, TERMINAL_STATES, JobEvent, MakerClient
from .errors import PROBLEM_BASE, MakerAPIError, parse_retry_after
from .sse import ServerSentEvent, parse_sse
from .webhook import WebhookVerificationError, sign_webhook, verify_webhook

__all__ = [
    "BATCH_ENDED",
    "JobEvent",
    "MakerAPIError",
    "MakerClient",
    "PROBLEM_BASE",
    "ServerSentEvent",
    "TERMINAL_STATES",
    "WebhookVerificationError",
    "parse_retry_after",
    "parse_sse",
    "sign_webhook",
    "verify_webhook",
]

__version__ = "0.1.0"
