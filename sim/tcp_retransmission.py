"""TCP's retransmission timer, as Linux runs it: when a segment lost on a cut link is sent
again (SimNetwork's late delivery, ``sim.network``, 5).

Linux retransmits an unacknowledged segment TCP_RTO_MIN (200 ms) after sending it when the
round trip is short (loopback, a LAN), then doubles the wait each time up to TCP_RTO_MAX
(120 s); after ``net.ipv4.tcp_retries2`` = 15 retransmissions (the last 804.6 s after the
send) and one more wait, the connection is given up (924.6 s). A message held by a cut
therefore arrives at the first retransmission after the cut heals, not at the heal itself.
"""

from __future__ import annotations

_RTO_FIRST_S = 0.2
_RTO_MAX_S = 120.0
_RETRIES = 15  # net.ipv4.tcp_retries2


def next_retransmission_s(sent_at: float, now: float) -> float | None:
    """When TCP next retransmits a segment first sent at ``sent_at``, at ``now`` or later;
    None after the last of its ``tcp_retries2`` retransmissions (804.6 s after the send:
    the connection is given up one more wait later, at 924.6 s)."""
    wait = _RTO_FIRST_S
    at = sent_at + wait
    retries = 1
    while at < now:
        if retries == _RETRIES:
            return None
        wait = min(wait * 2, _RTO_MAX_S)
        at += wait
        retries += 1
    return at
