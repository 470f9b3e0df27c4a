"""The admin API (``scheduler.admin.api``: aiohttp, bearer token; apply, get, delete, dry-run plan,
status) and the synchronous client the CLI uses. This face imports only the client, so the CLI's
admin commands do not load the solver; import ``api``, ``dryrun`` and ``specs`` by module."""

from scheduler.admin import client
from scheduler.admin.client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError", "client"]
