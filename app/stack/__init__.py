"""The embedded local stack (`hubstream stack up|down|status`)."""

from app.stack.services import StackReport, ensure_mysql_database, stack_down, stack_status, stack_up

__all__ = ["StackReport", "ensure_mysql_database", "stack_down", "stack_status", "stack_up"]
