"""node.gc_tuning: the broker's start-up objects are kept out of the collector's full walks.

Each test runs in a process of its own: a frozen generation would stay frozen in the test
runner for every test after it."""

from __future__ import annotations

from tests.cli_run import python


def test_start_up_objects_leave_the_collectors_walks_and_start_up_garbage_is_collected() -> None:
    probe = (
        "import gc, weakref\n"
        "import kafkasim.node.kafka_apis  # the Kafka protocol's schemas, as a broker has them\n"
        "from kafkasim.node.gc_tuning import freeze_startup_objects\n"
        "class Node: pass\n"
        "garbage = Node(); garbage.me = garbage  # a cycle only the collector frees\n"
        "gone = weakref.ref(garbage); del garbage\n"
        "kept = Node(); kept.me = kept\n"
        "tracked_before = len(gc.get_objects())\n"
        "frozen = freeze_startup_objects()\n"
        "print(gone() is None, frozen == gc.get_freeze_count(), frozen > 50_000)\n"
        "print(len(gc.get_objects()) < tracked_before // 100)\n"
        "made_later = Node(); made_later.me = made_later\n"
        "later = weakref.ref(made_later); del made_later\n"
        "gc.collect()\n"
        "print(later() is None, kept.me is kept)\n"
    )
    done = python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"] * 6
