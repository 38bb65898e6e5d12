"""Sticky decode micro-batches ("lanes") on a pipelined replica.

A replica whose layers are split over ``S`` pipeline stages keeps up to ``S`` decode
micro-batches in flight.  Serving engines differ in how those micro-batches are formed:

* re-formed at every launch from whichever decoding requests are out of the pipeline
  (the default here, :func:`npusim.serving.schedulers.base.decodes`);
* **sticky**: a request keeps the micro-batch it joined until it finishes, and a
  micro-batch that comes back from the last stage with room takes new requests as it
  re-enters the first (vLLM's pipeline-parallel virtual engines, one scheduler per
  micro-batch; NpuSim's scheduler, whose first stage takes the batch returning from the
  last, ``config_helper_pds.cpp`` ``iter_start``).

With sticky lanes a replica decodes at most ``S x max_batch_size`` requests at a time,
however the stage and LM-head times line up, and a request's tokens come one lane round
apart.  Re-formed micro-batches fill whatever slot is free first, which can leave fewer
micro-batches in flight than stages when a round is shorter than ``S`` launches (the LM
head delays every stage's next launch), so a pool filled to ``S x max_batch_size`` then
leaves requests waiting for a whole wave.

This is policy only: the lanes hold references to request state and read whether a
member is in the pipeline (``RequestState.in_flight``); they never touch timing.
"""

from __future__ import annotations

from npusim.serving.state import RequestState


class DecodeLanes:
    """Lane membership of one replica's decoding requests (one instance per scheduler,
    so per replica).  Lanes take turns: lane ``k`` launches after lane ``k - 1``, as a
    pipeline's micro-batches follow one another through its stages.

    :meth:`next_batch` proposes a lane's micro-batch; :meth:`launched` commits it once
    the engine has launched it (a batch the engine drops, e.g. to wait for KV, leaves
    the lanes and the turn as they were)."""

    def __init__(self) -> None:
        self._lanes: dict[int, list[RequestState]] = {}
        # id(member) -> its preemption count when it joined: a member preempted since
        # has left (it is prefilled again, maybe in flight on another replica).
        self._joined: dict[int, int] = {}
        self._turn = 0  # the lane whose turn it is
        self._proposed: tuple[int, list[RequestState], int] | None = None

    @property
    def sizes(self) -> dict[int, int]:
        """Members per non-empty lane (for tests and inspection)."""
        return {lane: len(members) for lane, members in sorted(self._lanes.items())}

    def next_batch(self, running: list[RequestState], slots: int, lanes_max: int
                   ) -> list[RequestState]:
        """The requests of the next decode micro-batch, from ``running`` (decoding, out
        of the pipeline, in service order), at most ``slots`` of them.

        The lanes (``lanes_max``, one per pipeline stage) take turns.  The lane whose
        turn it is goes with its members and fills its room with new requests (in no
        lane), in ``running``'s order; members beyond ``slots`` (the limit shrank) leave
        it when it launches and queue as new requests.  A lane with no members and
        nothing to take gives up its turn; a lane still in the pipeline keeps it, so the
        batch is empty until it is back."""
        self._proposed = None
        present = {id(state) for state in running}
        # A member stays while it is in this lane's micro-batch in the pipeline or
        # running here; one that finished, was preempted or left the replica leaves.
        for lane in list(self._lanes):
            members = [m for m in self._lanes[lane]
                       if m.preempted == self._joined[id(m)]
                       and (m.in_flight or id(m) in present)]
            self._keep(lane, members)
        in_lanes = {id(m) for members in self._lanes.values() for m in members}
        new = [s for s in running if id(s) not in in_lanes]
        for step in range(lanes_max):
            lane = (self._turn + step) % lanes_max
            members = self._lanes.get(lane, [])
            if any(m.in_flight for m in members):
                return []  # its turn, but its previous token is not out yet
            batch = members[:slots] + new[:max(0, slots - len(members))]
            if batch:
                self._proposed = (lane, batch, lanes_max)
                return batch
        return []

    def launched(self, states: list[RequestState]) -> None:
        """The engine launched ``states`` (the proposed batch less any it preempted): they
        are the lane's members now, and the next lane has the turn."""
        if self._proposed is None:
            return
        lane, batch, lanes_max = self._proposed
        self._proposed = None
        went = {id(state) for state in states}
        members = [state for state in batch if id(state) in went]
        if not members:
            return
        for state in members:
            self._joined.setdefault(id(state), state.preempted)
        self._keep(lane, members)
        self._turn = (lane + 1) % lanes_max

    def _keep(self, lane: int, members: list[RequestState]) -> None:
        """``members`` are lane ``lane``'s; the others it had leave it."""
        kept = {id(m) for m in members}
        for gone in self._lanes.get(lane, []):
            if id(gone) not in kept:
                del self._joined[id(gone)]
        if members:
            self._lanes[lane] = members
        else:
            self._lanes.pop(lane, None)
