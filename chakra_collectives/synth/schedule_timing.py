"""What a TACOS schedule over direct links predicts by itself, without lowering or replaying it.

On a network without switches every message of a TACOS schedule crosses one link, holding it
for the network model's hop cost (:meth:`~chakra_collectives.synth.channels.Channels.hop_ns`),
and the lowering's dependencies make the model replay the schedule exactly: the model's time
is the phases' finishing times added up (a Reduce-Scatter is its All-Gather mirrored in time),
and what each link carried is what the schedule put on it. :func:`schedule_prediction` reads
both from the schedule's message columns, so a large run needs neither the prediction's task
graph (about 100 bytes per operation beside the operation table) nor its seconds.
``tests/test_schedule_timing.py`` checks both against
:func:`~chakra_collectives.network.collective.simulate_collective`.

>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.synth.matcher import match_all_gather
>>> channels = build_channels(torus2d(4, 4), chunk_bytes=2**16)
>>> schedule = match_all_gather(channels, 1, seed=0)
>>> time_ns, limit = schedule_prediction([schedule], channels)
>>> time_ns == schedule.time_ns, limit.messages > 0
(True, True)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from chakra_collectives.network.bottleneck import Bottleneck, busiest_of
from chakra_collectives.network.engine import LinkUse
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.schedule import Schedule

def predicts_itself(channels: Channels) -> bool:
    """Whether a TACOS schedule on ``channels`` is its own prediction: no routed channels (their
    switch queues are the model's, not the schedule's, in a mirrored Reduce-Scatter). Then the
    network model's replay of the lowered algorithm is not run: at 64 NPUs it took as long as
    the matching it repeats (``tests/test_schedule_timing.py`` keeps the two equal).

    >>> from chakra_collectives.topology import mesh2d, switch
    >>> from chakra_collectives.synth.channels import build_channels
    >>> predicts_itself(build_channels(mesh2d(4, 4), chunk_bytes=64)), predicts_itself(build_channels(switch(8), chunk_bytes=64))
    (True, False)
    """
    return not channels.routed


def schedule_link_use(schedules: Sequence[Schedule], channels: Channels) -> LinkUse:
    """Busy time, bytes and messages per link of the phases ``schedules`` together (direct
    channels only), added up per link as the model's run adds them: every distinct message size
    once, smallest first."""
    model = channels.model
    if any(int(s.channel.min(initial=0)) < 0 for s in schedules):
        raise ValueError("a schedule over routed channels does not predict itself")
    stride = max(int(s.count.max(initial=0)) for s in schedules) + 1
    # messages per (link, chunks) kind, counted one schedule at a time: a key per message, no sort
    per_kind = sum(np.bincount(channels.direct_link[s.channel].astype(np.int64) * stride + s.count, minlength=model.num_links * stride) for s in schedules)
    kinds = np.flatnonzero(per_kind)
    per_kind = per_kind[kinds]
    link, nbytes = kinds // stride, kinds % stride * channels.chunk_bytes
    hop_busy, _ = model.hop_times(link, nbytes)
    busy = np.zeros(model.num_links)
    carried = np.zeros(model.num_links, dtype=np.int64)
    messages = np.zeros(model.num_links, dtype=np.int64)
    np.add.at(busy, link, per_kind * hop_busy)
    np.add.at(carried, link, per_kind * nbytes)
    np.add.at(messages, link, per_kind)
    return LinkUse(busy_ns=busy, bytes=carried, messages=messages)


def schedule_prediction(schedules: Sequence[Schedule], channels: Channels) -> tuple[float, Bottleneck | None]:
    """The network model's time of the phases ``schedules`` run one after the other (their
    finishing times added up) and its busiest link (:func:`~chakra_collectives.network.bottleneck.busiest_of`)."""
    time_ns = float(sum(s.time_ns for s in schedules))
    return time_ns, busiest_of(schedule_link_use(schedules, channels), channels.model, time_ns)


__all__ = ["predicts_itself", "schedule_link_use", "schedule_prediction"]
