"""Read-only JSON views of subscriptions on the worker's web server.

GET /subscriptions/shards                       this worker's shards: counters, blocked groups
GET /subscriptions/{name}/groups/{group_id}     a group's GroupState (from the owning shard here)
GET /subscriptions/{name}/lag                   lag per shard of MQ and RQ, DLQ depth (parked);
                                                the same answer for LAG_ANSWER_S, one computed at a time
GET /subscriptions/{name}/blocked               groups blocked by a DLQ'd message, on this worker

`SubscriptionViews` holds framework-neutral aiohttp handlers (`routes()` for tests and embedders);
`register_views` mounts them on the Faust web server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from faust.web import View

from app.ordered.records import decode_group_id
from app.subscription.api_models import (
    BlockedGroups,
    GroupStateAnswer,
    GroupStateView,
    Shards,
    ShardStatus,
    SubscriptionLag,
)
from app.subscription.errors import UnknownSubscription
from app.subscription.ops import lag_report
from app.subscription.supervisor import Supervisor
from app.web.recent_answers import RecentAnswers
from app.web.responses import guarded, model_response

__all__ = ["SubscriptionViews", "register_views"]

LAG_ANSWER_S = 2.0  # each answer builds Kafka clients: asked in a loop, it is built once per this


class SubscriptionViews:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self._lag: RecentAnswers[str, dict[str, Any]] = RecentAnswers(LAG_ANSWER_S)

    async def _known(self, name: str) -> None:
        subs = await asyncio.to_thread(self.supervisor.registry.refresh)
        if name not in subs:
            raise UnknownSubscription(f"no subscription named {name!r}")

    @guarded
    async def shards(self, request: web.Request) -> web.StreamResponse:
        sup = self.supervisor
        shards = [ShardStatus.model_validate(s) for s in sup.status()]
        return model_response(Shards(owned_slots=sorted(sup.owned_slots() or ()), shards=shards))

    @guarded
    async def group_state(self, request: web.Request) -> web.StreamResponse:
        name, group_id = request.match_info["name"], request.match_info["group_id"]
        decode_group_id(group_id.encode(), self.supervisor.settings.max_group_id_bytes)
        runner = self.supervisor.runner_for(name, group_id)
        if runner is None:
            await self._known(name)
            return model_response(
                GroupStateAnswer(subscription=name, group_id=group_id, owned_here=False, state=None)
            )
        state = runner.states.get(group_id)
        return model_response(
            GroupStateAnswer(
                subscription=name,
                group_id=group_id,
                owned_here=True,
                shard=runner.shard_id,
                state=None if state is None else GroupStateView.model_validate(state.to_json()),
                blocked=bool(state and state.dlq.pending),
                pending_in_rq=bool(state and state.rq.pending),
            )
        )

    @guarded
    async def lag(self, request: web.Request) -> web.StreamResponse:
        sup = self.supervisor
        name = request.match_info["name"]
        await self._known(name)  # an unknown name costs no clients and takes no place in the cache
        report = await self._lag.get(
            name, lambda: asyncio.to_thread(lag_report, sup.settings, sup.registry, sup.metadata, name)
        )
        return model_response(SubscriptionLag.model_validate(report))

    @guarded
    async def blocked(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        await self._known(name)
        shards = [s for s in self.supervisor.status() if s["subscription"] == name]
        groups = sorted(g for s in shards for g in s["blocked_groups"])
        return model_response(
            BlockedGroups(subscription=name, shards_here=[s["shard"] for s in shards], blocked_groups=groups)
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/subscriptions/shards", self.shards),
            web.get("/subscriptions/{name}/groups/{group_id}", self.group_state),
            web.get("/subscriptions/{name}/lag", self.lag),
            web.get("/subscriptions/{name}/blocked", self.blocked),
        ]


def register_views(app: Any, supervisor: Supervisor) -> SubscriptionViews:
    """Mount the views on the Faust web server (Faust passes path parameters as arguments)."""

    views = SubscriptionViews(supervisor)

    def mount(path: str, name: str, handler: Any) -> None:
        async def get(self: Any, request: web.Request, **_params: str) -> web.StreamResponse:
            response: web.StreamResponse = await handler(request)
            return response

        app.page(path, name=name)(type(f"SubscriptionView_{name}", (View,), {"get": get}))

    mount("/subscriptions/shards", "subscription_shards", views.shards)
    mount("/subscriptions/{name}/groups/{group_id}", "subscription_group", views.group_state)
    mount("/subscriptions/{name}/lag", "subscription_lag", views.lag)
    mount("/subscriptions/{name}/blocked", "subscription_blocked", views.blocked)
    return views
