"""The allocation round of a router whose channels all have one virtual channel.

NPU presets use plain wormhole routers (``virtual_channels = 1``), and an allocation
round is the hottest code of a tlm LLM run (one per packet train per router crossed).
:func:`allocate_single` is :meth:`Router.allocate` with everything a single VC makes
trivial taken out: no VC loop per input port, VC allocation and ``_earliest`` inlined,
and a round with one request (the usual case) granted without building output groups.
It makes the same decisions in the same order, so the same side effects (VC
allocation of a packet that then loses the switch, round-robin pointers, wake-ups);
``tests/hw/test_noc_single.py`` checks it against :meth:`Router.allocate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npusim.hw.interconnect.noc_channels import INF, next_request

if TYPE_CHECKING:
    from npusim.hw.interconnect.noc_router import Router


def allocate_single(router: "Router", t: int) -> None:
    """One allocation round of ``router`` at ``t`` (see :meth:`Router.allocate`)."""
    nxt = INF
    inputs = router.inputs
    nports = len(inputs)
    start_port = router.port_rr
    router.port_rr = (start_port + 1) % nports  # rotate who allocates VCs first
    xbar_free = router.xbar_free
    chosen_p = -1
    chosen_packet: Any = None
    others: list[tuple[int, int, Any]] | None = None  # further requests this round
    busy_ports = 0  # inputs with queued packets (one: a train there is never contended)
    for p in router.orders[start_port]:
        ch_in = inputs[p]
        if not ch_in.queued:
            continue
        busy_ports += 1
        queue = ch_in.waiting[0]
        if not queue:
            continue
        front_free = ch_in.front_free[0]
        if front_free < 0:
            continue  # the previous packet's tail is stuck; its release wakes us
        packet = queue[0]
        ready = packet.ready
        if front_free > ready:
            ready = front_free
        if ready > t:
            if ready < nxt:
                nxt = ready
            continue
        # Router._earliest with one VC per channel.
        j = packet.j
        out = packet.path[j]
        when = out.busy_until
        xfree = xbar_free[p]
        if xfree > when:
            when = xfree
        if not out.sink:
            if packet.vcs[j] < 0:  # VC allocation: the output's only VC, once its holder left
                free = out.owner_free[0]
                if 0 <= free <= t:
                    packet.vcs[j] = 0
                    out.owner_free[0] = -1
                    out.va_rr = 0
                else:
                    if free < 0:
                        out.starved = True  # woken when the holder's release is known
                    elif free < nxt:
                        nxt = free
                    continue
            credit = router._credit_time(out, 0, packet, t)
            if credit > when:
                when = credit
        if when > t:
            if when < nxt:
                nxt = when
            continue
        if chosen_packet is None:
            chosen_p, chosen_packet = p, packet
        elif others is None:
            others = [(p, 0, packet)]
        else:
            others.append((p, 0, packet))
    if chosen_packet is None:
        if nxt < INF:
            router.poke(nxt)
        return
    period = router.net.period_ps
    if others is None:  # the usual case: one request, for one output (no output groups)
        nxt = _grant(router, chosen_packet, chosen_p, t, busy_ports == 1, period, nxt)
        if nxt < INF:
            router.poke(nxt)
        return
    picks: dict[Any, list[tuple[int, int, Any]]] = {}
    for chosen in [(chosen_p, 0, chosen_packet), *others]:
        out = chosen[2].path[chosen[2].j]
        if out in picks:
            picks[out].append(chosen)
        else:
            picks[out] = [chosen]
    # Output stage: each output grants one of the ports that picked it.
    for out, requests in picks.items():
        if len(requests) > 1:
            base = out.sa_rr
            requests.sort(key=lambda r: (r[0] - base) % nports)
            if t + period < nxt:
                nxt = t + period  # the losers retry next cycle
        p, _v, packet = requests[0]
        nxt = _grant(router, packet, p, t, busy_ports == 1, period, nxt)
    if nxt < INF:
        router.poke(nxt)


def _grant(router: "Router", packet: Any, p: int, t: int, alone: bool, period: int,
           nxt: int) -> int:
    """Grant ``packet`` (front of input port ``p``) its output and move the round-robin
    pointers past it; returns ``nxt`` lowered to when the next packet of that input may
    request."""
    inputs = router.inputs
    router.in_rr[p] = 0
    packet.path[packet.j].sa_rr = (p + 1) % len(inputs)
    router._grant(packet, p, 0, t, alone)
    return next_request(inputs[p], 0, t + period, nxt)
