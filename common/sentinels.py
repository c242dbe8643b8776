"""Kafka's wire sentinels and integer limits, defined once for every layer.

Limits of Kafka's fixed-width types (``int16``/``int32``/``int64`` fields, config ranges,
index entries), and the special values that requests and records carry in place of a real one:

    NO_TIMESTAMP          -1  a record or index entry without a timestamp
    LATEST_TIMESTAMP      -1  ListOffsets: the latest offset (the high watermark for consumers)
    EARLIEST_TIMESTAMP    -2  ListOffsets: the log start offset
    MAX_TIMESTAMP         -3  ListOffsets: the offset of the record with the largest timestamp
    EARLIEST_LOCAL_TIMESTAMP -4  ListOffsets (KIP-405): the local log start; without tiered
                              storage, EARLIEST
    LATEST_TIERED_TIMESTAMP  -5  ListOffsets (KIP-1005): the last tiered offset; without tiered
                              storage, none
    CONSUMER_REPLICA_ID   -1  replica_id of a Fetch/ListOffsets sent by a client, not a broker
    NO_LEADER_EPOCH       -1  current_leader_epoch when the sender knows none (no fencing)
"""

from __future__ import annotations

from typing import Final

INT16_MIN: Final = -(2**15)
INT16_MAX: Final = 2**15 - 1
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

NO_TIMESTAMP: Final = -1
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4
LATEST_TIERED_TIMESTAMP: Final = -5

CONSUMER_REPLICA_ID: Final = -1
NO_LEADER_EPOCH: Final = -1
