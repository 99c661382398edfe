"""Reading the examples' JSON events from a rank's log (e2e/realnode.events)."""

from __future__ import annotations

from trainstack.e2e.realnode import events


def test_two_ranks_lines_merged_by_mpirun_count_as_two_events():
    # as the kind run's MLX launcher logged them: mpirun forwarded rank 0's line and rank 1's before either newline
    lines = ['{"event": "start", "rank": 0}{"event": "start", "rank": 1}', "",
             '{"event": "step", "rank": 0, "step": 1}']
    assert [e["rank"] for e in events(lines, "start")] == [0, 1]
    assert events(lines, "step") == [{"event": "step", "rank": 0, "step": 1}]


def test_lines_that_are_not_json_are_passed_over():
    assert events(["Warning: Permanently added", "{not json", '{"event": "done"} then text'], "done") == \
        [{"event": "done"}]
