"""The compiled record walk (``_cwalk.c``): :func:`walk_records`, with the contract of
:func:`kafkasim.storage.records.walk_vector.walk_records`; its checks may also be passed by
position, as validation does (no keyword parse per call)."""

def walk_records(
    data: bytes | bytearray | memoryview,
    count: int,
    last_delta: int,
    dense: bool,
    compacted: bool,
    base_ts: int,
    low: int,
    high: int,
) -> int | None: ...
