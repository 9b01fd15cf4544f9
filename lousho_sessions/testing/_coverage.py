"""Which kit tests exercise which contract method, and the check that a store overrides none
the kit has no test for (as LangGraph's conformance suite keys its tests on capabilities).

A contract method is a public method of ``BaseSessionStore``, ``BaseCheckpointStore`` or
``BaseApprovalStore``. A store *overrides* one when ``type(part).method is not
Base.method``: its own code then runs where the default did, and the kit must call it.
``EXERCISED`` names, for each contract method, the kit tests that call it and check
what it answers (the most direct first).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..stores.base import BaseApprovalStore, BaseCheckpointStore, BaseSessionStore
from ._base import KitBase
from ._support import Parts

__all__ = ["CONTRACT", "EXERCISED", "CoverageTests", "contract_methods", "overrides", "uncovered"]

#: The part names of ``Parts`` and the base class each follows.
CONTRACT: dict[str, type] = {
    "sessions": BaseSessionStore,
    "checkpoints": BaseCheckpointStore,
    "approvals": BaseApprovalStore,
}

_S, _C, _A = "BaseSessionStore", "BaseCheckpointStore", "BaseApprovalStore"

#: ``"<Base>.<method>"`` -> the kit tests that exercise it, the most direct first.
EXERCISED: dict[str, tuple[str, ...]] = {
    f"{_S}.load": ("test_save_load_round_trip", "test_unknown_id_loads_none"),
    f"{_S}.save": (
        "test_save_load_round_trip",
        "test_save_replaces",
        "test_save_rejects_non_messages",
    ),
    f"{_S}.delete": ("test_delete", "test_append_after_save_and_delete"),
    f"{_S}.append": (
        "test_append",
        "test_append_conflict_leaves_transcript",
        "test_failed_append_creates_nothing",
        "test_stale_fence_append_changes_nothing",
        "test_end_to_end_two_sessions_take_turns",
    ),
    f"{_S}.revision": (
        "test_revision_changes_with_every_write",
        "test_revision_moves_with_commits_and_stays_otherwise",
        "test_revision_is_per_session",
    ),
    f"{_S}.load_since": (
        "test_load_since_returns_what_another_store_appended",
        "test_load_since_after_save_or_delete_never_answers_a_wrong_list",
        "test_end_to_end_two_sessions_take_turns",
    ),
    f"{_S}.commit_turn": (
        "test_commit_turn_commits_a_turn",
        "test_commit_turn_refuses_a_conflict",
        "test_commit_turn_refuses_a_stale_fence",
        "test_commit_turn_with_release_frees_the_lease",
        "test_commit_turn_stores_the_turn_state",
        "test_end_to_end_durable_turn_with_a_tool",
        "test_end_to_end_two_sessions_take_turns",
    ),
    f"{_S}.turn_lock": (
        "test_lease_is_a_context_manager_with_a_fence",
        "test_fences_grow",
        "test_turn_lock_excludes_other_threads",
        "test_turn_lock_excludes_other_processes",
    ),
    f"{_S}.take_turn": (
        "test_take_turn_is_turn_lock_with_what_the_turn_starts_from",
        "test_take_turn_saves_only_a_turn_nothing_moved_under",
        "test_take_turn_refuses_to_save_what_it_may_not",
        "test_end_to_end_two_sessions_take_turns",
        "test_end_to_end_durable_turn_with_a_tool",
    ),
    f"{_S}.claim_stale": ("test_turn_held_and_claim_stale_leave_a_held_session_alone",),
    f"{_S}.turn_held": ("test_turn_held_and_claim_stale_leave_a_held_session_alone",),
    f"{_S}.held_sessions": ("test_turn_held_and_claim_stale_leave_a_held_session_alone",),
    f"{_S}.prune": (
        "test_prune_sessions",
        "test_prune_keeps_a_session_whose_turn_holds_its_lease",
        "test_prune_removes_the_state_of_the_sessions_it_removes",
    ),
    f"{_S}.take_over": ("test_take_over_refuses_the_holders_writes",),
    f"{_S}.usage": (
        "test_usage_is_the_sum_over_the_transcript",
        "test_session_usage_is_the_sum_over_its_transcript",
    ),
    f"{_S}.rewind": (
        "test_rewind_keeps_a_prefix_and_returns_what_it_removed",
        "test_rewind_refuses_what_it_may_not_do_and_changes_nothing",
        "test_rewind_with_a_stale_fence_changes_nothing",
        "test_load_since_after_a_rewind_never_answers_a_wrong_list",
    ),
    f"{_S}.fork": (
        "test_fork_copies_a_prefix_and_names_its_parent",
        "test_fork_refuses_an_existing_id_or_a_missing_source",
        "test_fork_copies_the_state",
    ),
    f"{_S}.load_state": (
        "test_state_round_trip_and_compare_and_set",
        "test_commit_turn_stores_the_turn_state",
        "test_fork_copies_the_state",
    ),
    f"{_S}.save_state": (
        "test_state_round_trip_and_compare_and_set",
        "test_state_with_a_stale_fence_changes_nothing",
        "test_fork_copies_the_state",
    ),
    f"{_S}.list_ids": ("test_list_ids_and_info",),
    f"{_S}.info": ("test_list_ids_and_info", "test_fork_copies_a_prefix_and_names_its_parent"),
    f"{_S}.close": ("test_reopened_store_keeps_transcripts",),
    f"{_C}.load": ("test_checkpoints", "test_checkpoint_unknown_fields_round_trip"),
    f"{_C}.save": (
        "test_checkpoints",
        "test_checkpoint_must_be_json",
        "test_stale_fence_checkpoint_writes_change_nothing",
    ),
    f"{_C}.delete": ("test_checkpoints", "test_stale_fence_checkpoint_writes_change_nothing"),
    f"{_C}.list": ("test_checkpoints",),
    f"{_C}.save_and_delete": ("test_save_and_delete_replaces_the_turns_records",),
    f"{_C}.pending_turns": ("test_checkpoints",),
    f"{_C}.pending_checkpoints": ("test_checkpoints",),
    f"{_C}.pending_fields": ("test_checkpoints",),
    f"{_C}.prune": ("test_prune_checkpoints",),
    f"{_C}.close": ("test_reopened_store_keeps_checkpoints",),
    f"{_A}.create": (
        "test_approvals_create_get_list",
        "test_stale_fence_approval_create_changes_nothing",
    ),
    f"{_A}.get": ("test_approvals_create_get_list",),
    f"{_A}.resolve": (
        "test_approval_resolve",
        "test_approval_resolve_has_exactly_one_winner",
        "test_approval_resolve_with_edited_arguments",
        "test_end_to_end_approval_resolved_once",
    ),
    f"{_A}.list": ("test_approvals_create_get_list", "test_approval_resolve"),
    f"{_A}.delete": ("test_approval_delete",),
    f"{_A}.prune": ("test_prune_approvals",),
    f"{_A}.close": ("test_reopened_store_keeps_approvals",),
}


def contract_methods(base: type) -> list[str]:
    """The public methods of the contract's base class ``base``, sorted."""
    return sorted(
        name for name in dir(base) if not name.startswith("_") and callable(getattr(base, name))
    )


def overrides(part: object, base: type) -> list[str]:
    """The contract methods of ``base`` that ``part``'s class overrides, sorted."""
    return [
        name
        for name in contract_methods(base)
        if getattr(type(part), name, None) is not getattr(base, name)
    ]


def uncovered(
    parts: Parts, kit: type, exercised: Mapping[str, tuple[str, ...]] = EXERCISED
) -> list[str]:
    """``"<Base>.<method>"`` for each method the store's parts override that no test of the
    test class ``kit`` exercises (``exercised`` names none, or none of those ``kit`` has)."""
    missing = []
    for name, base in CONTRACT.items():
        part = getattr(parts, name)
        if part is None:
            continue
        for method in overrides(part, base):
            key = f"{base.__name__}.{method}"
            if not any(callable(getattr(kit, test, None)) for test in exercised.get(key, ())):
                missing.append(f"{key} (overridden by {type(part).__qualname__})")
    return missing


class CoverageTests(KitBase):
    """The kit calls every method the store overrides."""

    def test_kit_exercises_every_override(self, tmp_path: Path) -> None:
        """A store overriding a contract method the kit has no test for fails here, naming it:
        its own code runs where the default did, and nothing here would check it."""
        with self.store(tmp_path) as parts:
            missing = uncovered(parts, type(self))
        assert not missing, (
            "the store overrides contract methods the kit does not exercise: " + ", ".join(missing)
        )
