"""Which corpus a bench command parses: the ``--corpus`` options and the one loader behind them.

``real`` (the default): bodies shaped like production vLLM traffic, made from real bodies
(:mod:`bench.real_corpus`). ``generated``: :mod:`bench.corpus` (gpu_stage.synth's shapes in a size
mix, with mutations), the harness's corpus before ``real``. ``synth``: gpu_stage.synth's ~1 KB bodies
alone, what the broker benchmarks loaded before ``real``. ``escapes``: bodies full of JSON escapes
(:mod:`bench.escape_corpus`): for parity and the device lane's share, not a speed figure.
``--corpus-in FILE`` reads a corpus written by ``--corpus-out`` (on another host, say) instead.
``--longest B`` drops the bodies longer than B bytes: the device lane's batch lasts as long as its
longest body's walk, so a run with and one without the tail of long bodies shows what that tail costs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import corpus, escape_corpus, real_corpus
from gpu_stage import synth

KINDS = ("real", "generated", "synth", "escapes")
BAD_RATE = 0.01


def add_options(p: argparse.ArgumentParser) -> None:
    """``--corpus``, ``--seed``, ``--bad-rate``, ``--sizes``, ``--corpus-in``, ``--corpus-out``."""
    p.add_argument("--corpus", choices=KINDS, default="real",
                   help="real: shaped like production vLLM traffic (default); generated: bench.corpus's size "
                   "mix; synth: gpu_stage.synth's ~1 KB bodies; escapes: strings full of JSON escapes")  # fmt: skip
    p.add_argument("--seed", type=int, default=corpus.CorpusConfig.seed)
    p.add_argument("--bad-rate", type=float, default=BAD_RATE, help="broken bodies (real and generated)")
    p.add_argument("--sizes", type=corpus.parse_sizes, default=None,
                   help="generated only: body size mix, e.g. 1024:1 for 1 KB only (default "
                   + ",".join(f"{size}:{share}" for size, share in corpus.SIZES) + ")")  # fmt: skip
    p.add_argument("--corpus-in", type=Path, help="read the corpus from this file instead of generating it")
    p.add_argument("--corpus-out", type=Path, help="write the corpus here (for a run on another host)")
    p.add_argument("--longest", type=int, default=None,
                   help="drop the bodies longer than this many bytes (the result says how many)")  # fmt: skip


def command(
    prog: str, description: str, records: int, argv: list[str] | None
) -> tuple[argparse.Namespace, corpus.Corpus]:
    """A corpus command's options parsed (``--records``, the corpus options, ``--out``) and its corpus made or read."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--records", type=int, default=records)
    add_options(p)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    check(p, args)
    return args, load(args, args.records)


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse options that do not apply to the corpus asked for (``p.error`` exits)."""
    if args.sizes is not None and args.corpus != "generated":
        p.error(f"--sizes applies to --corpus generated, not {args.corpus}")
    if args.longest is not None and args.longest < 1:
        p.error(f"--longest must be a positive number of bytes, not {args.longest}")


def make(
    kind: str, records: int, seed: int, bad_rate: float = BAD_RATE, sizes: tuple[tuple[int, float], ...] | None = None
) -> corpus.Corpus:
    """``records`` bodies of corpus ``kind``; its config says which corpus it is."""
    if kind == "real":
        return real_corpus.generate(records, seed, bad_rate)
    if kind == "escapes":
        return escape_corpus.escape_bodies(records, seed)
    if kind == "synth":
        config = {"corpus": "synth", "records": records, "seed": seed, "target_bytes": synth.SynthConfig.target_bytes}
        return corpus.Corpus(synth.bodies(records, synth.SynthConfig(seed=seed)), config)
    cfg = corpus.CorpusConfig(records=records, seed=seed, bad_rate=bad_rate, sizes=sizes or corpus.SIZES)
    made = corpus.generate(cfg)
    return corpus.Corpus(made.values, {"corpus": "generated", **made.config})


def load(args: argparse.Namespace, records: int) -> corpus.Corpus:
    """The corpus the options ask for: read from ``--corpus-in`` (its first ``records``) or made, then written.

    With ``--longest``, without the bodies longer than that (what is written is what is parsed).
    """
    if args.corpus_in is not None:
        return at_most(corpus.read(args.corpus_in, limit=records), args.longest)
    made = at_most(make(args.corpus, records, args.seed, args.bad_rate, args.sizes), args.longest)
    if args.corpus_out is not None:
        corpus.write(made, args.corpus_out)
    return made


def at_most(made: corpus.Corpus, longest: int | None) -> corpus.Corpus:
    """``made`` without its bodies longer than ``longest`` bytes; the config says how many went."""
    if longest is None:
        return made
    kept = [v for v in made.values if len(v) <= longest]
    return corpus.Corpus(kept, {**made.config, "longest": longest, "dropped": len(made.values) - len(kept)})
