"""bench/smoke.py: the one tiny-mode switch every bench takes."""

from __future__ import annotations

import argparse

import pytest

from bench import smoke


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--no-peer", action="store_true")
    return p


def test_without_the_switch_the_defaults_stay() -> None:
    args = smoke.parse_args(parser(), [], messages=300, no_peer=True)
    assert (args.smoke, args.messages, args.no_peer) == (False, 20_000, False)


def test_the_switch_sets_the_tiny_settings() -> None:
    args = smoke.parse_args(parser(), ["--smoke"], messages=300, no_peer=True)
    assert (args.smoke, args.messages, args.no_peer) == (True, 300, True)


def test_a_flag_beside_the_switch_wins() -> None:
    args = smoke.parse_args(parser(), ["--messages", "50", "--smoke"], messages=300)
    assert args.messages == 50


def test_a_tiny_setting_for_no_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="messagse"):
        smoke.parse_args(parser(), ["--smoke"], messagse=300)
