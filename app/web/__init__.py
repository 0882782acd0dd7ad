"""Web conventions shared by every capability's views (served by the Faust web server)."""

from app.web.responses import error_response, guarded, read_json, require_admin

__all__ = ["error_response", "guarded", "read_json", "require_admin"]
