"""Small value types shared across layers."""

from __future__ import annotations

import re
from typing import NamedTuple

from kafkasim.common.errors import InvalidTopicError

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
TOPIC_NAME_MAX_LENGTH = 249


class TopicPartition(NamedTuple):
    """A partition of a topic; its log directory is ``<topic>-<partition>``."""

    topic: str
    partition: int

    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``<topic>-<partition>`` (topics may contain '-', so split on the last one)."""
        topic, sep, part = name.rpartition("-")
        if not sep or not topic or not part.isdigit():
            raise ValueError(f"not a partition directory name: {name!r}")
        return cls(topic, int(part))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def validate_topic_name(topic: str) -> None:
    """Kafka's topic name rules; raises INVALID_TOPIC_EXCEPTION naming what is wrong."""
    err = InvalidTopicError
    if not topic:
        raise err("topic name is empty")
    if topic in (".", ".."):
        raise err(f"topic name cannot be {topic!r}")
    if len(topic) > TOPIC_NAME_MAX_LENGTH:
        raise err(f"topic name is longer than {TOPIC_NAME_MAX_LENGTH} characters: {topic!r}")
    if not _LEGAL_TOPIC.match(topic):
        raise err(
            f"topic name {topic!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
        )
