"""``lousho rotate-key``: rewrite every stored record with the store's current encryption key."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from ._context import Context
from ._output import EXIT_FOUND, EXIT_OK, EXIT_USAGE, CommandError, Progress

__all__ = ["register"]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "rotate-key",
        parents=[common],
        help="re-encrypt every record with the current encryption key",
        description="Rewrite every message, checkpoint and approval record sealed with an "
        "older key (or written in clear) with the store's current key, --batch records at "
        "a time. The store URL names the keys: ?encryption_key_env=NAME, the variable "
        "holding keyid:base64key[,...] with the new key last and the old ones before it. "
        "Give every worker the new keys first; once this reports nothing skipped, the "
        "old keys can be dropped (docs/operations.md). Exit 1 when records changed while it "
        "ran (run it again).",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=500,
        metavar="N",
        help="records read and rewritten at once (500)",
    )
    p.set_defaults(run=rotate_key)


def rotate_key(ctx: Context) -> int:
    if ctx.args.batch < 1:
        raise CommandError(f"--batch must be a positive integer, got {ctx.args.batch}", EXIT_USAGE)
    store = ctx.store
    with Progress("rotate-key", 1) as progress:
        result = store.rotate_key(batch_size=ctx.args.batch)
        progress.advance()
    body = attrs.asdict(result)
    if ctx.out.as_json:
        ctx.out.json(body)
    else:
        ctx.out.fields([(k, v) for k, v in body.items()])
    return EXIT_FOUND if result.skipped else EXIT_OK
