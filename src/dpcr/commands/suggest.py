"""``dpcr suggest CONFIG``: choose the constraint's bound (k, or B, per class) with the data.

Reads the changelog the configuration names and prints, for candidate bounds, the share of
mutations and of units bounding would drop and every statistic's predicted error under that
bound (:mod:`dpcr.release._suggest`). The dropped shares are differentially private (``--epsilon``,
default 0.1, stated with the guarantee it adds to the release's), or exact with ``--exact``:
then the output is labelled operator-only. Prints to stdout; writes no file.
"""

from __future__ import annotations

import argparse
import json

from dpcr.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "suggest",
        help="show, for candidate k (or B, per class), the share of mutations and units "
        "bounding would drop (DP, or --exact: operator only) and each statistic's predicted "
        "error (reads the changelog, writes nothing)",
        description="Choose the constraint's bound with the data: for candidate k (at most k "
        "mutations) or B (time-bounded), per class of a hybrid constraint, the share of "
        "mutations and of units that bounding would drop and the predicted noise std of every "
        "statistic. The shares come from differentially private histograms (--epsilon, stated "
        "and added to the release's guarantee) unless --exact asks for exact, operator-only "
        "figures.",
    )
    p.add_argument("config", help="TOML release configuration")
    p.add_argument(
        "--epsilon",
        type=float,
        default=0.1,
        help="privacy budget of the dropped shares, per unit (default 0.1)",
    )
    p.add_argument("--exact", action="store_true",
                   help="exact shares from the raw data: not differentially private, "
                   "labelled OPERATOR ONLY (do not publish)")  # fmt: skip
    p.add_argument(
        "--k",
        metavar="K,K,...",
        help="candidate k for at-most-k classes (default 1,2,3,4,6,8,12,16,24,32)",
    )
    p.add_argument("--bound", metavar="B,B,...",
                   help="candidate B for time-bounded classes, e.g. 7d,31d (default 1d, 7d, "
                   "14d, 31d, 62d, 92d, 183d, 365d)")  # fmt: skip
    p.add_argument("--cap", type=int,
                   help="clamp a unit's mutations at this many in the DP figures (default: "
                   "four times the largest k; 64 for time-bounded classes)")  # fmt: skip
    p.add_argument(
        "--simulate",
        type=int,
        metavar="SEED",
        help="seeded noise, for tests (the output says SIMULATION)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_suggest)


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(
            f"--{what} takes integers separated by commas (e.g. 1,2,4), got {text!r}"
        ) from None


def _durations(text: str | None) -> list[int] | None:
    from dpcr.timeutil import parse_duration

    if text is None:
        return None
    return [parse_duration(v.strip(), name="--bound") for v in text.split(",")]


def _cmd_suggest(args: argparse.Namespace) -> int:
    from dpcr.config import load_config
    from dpcr.noise import simulation_randomness

    if args.exact and args.simulate is not None:
        raise ConfigError("--exact adds no noise: leave out --simulate")
    ks, bounds = _ints(args.k, "k"), _durations(args.bound)
    config = load_config(args.config)
    rng = simulation_randomness(args.simulate) if args.simulate is not None else None
    result = config.suggest(epsilon=args.epsilon, exact=args.exact, ks=ks, bounds=bounds,
                            cap=args.cap, rng=rng)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print("\n".join(result.lines()))
    return 0
