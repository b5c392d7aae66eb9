"""The demo's summary: counts, dead letters, rates, latency, backend, feature rows and the checks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from demo.measure import Contents, header_int, percentiles, sent_at_ms
from demo.run import Report
from llmpipe import headers as h


def _pct(values: Sequence[float]) -> str:
    p = percentiles(values)
    return "n/a" if not p else f"P50 {p[50]:,.0f} ms | P95 {p[95]:,.0f} ms | P99 {p[99]:,.0f} ms  (n={len(values)})"


def _counts(r: Report, c: Contents) -> Iterator[str]:
    yield f"requests sent              {r.requests:>8,}"
    yield f"raw (llm.raw)              {len(c.raw):>8,}"
    yield f"typed (llm.typed.*)        {len(c.typed):>8,}"
    yield f"dead letters (llm.dlq)     {len(c.dlq):>8,}"
    for (stage, reason), n in sorted(r.contents.dlq_by_label().items() if r.contents else []):
        yield f"  {stage:<10} {reason:<17} {n:>6,}"
    invalid = sum(row["content_valid"] is False for row in c.typed)
    json_rows = sum(row["content_valid"] is not None for row in c.typed)
    yield (f"invalid content            {invalid:>8,}  = {invalid / max(len(c.typed), 1):.2%} of typed, "
           f"{invalid / max(json_rows, 1):.2%} of the {json_rows:,} JSON answers (prose is not JSON, not invalid)")


def _throughput(r: Report, c: Contents) -> Iterator[str]:
    sent = sent_at_ms(c.raw)
    received = [x for m in c.raw if (x := header_int(m, h.RECEIVED_AT_MS)) is not None]
    if sent and received:
        span = max(max(received) - min(sent.values()), 1) / 1000
        yield (f"connector    {len(c.raw) / span:>8,.0f} responses/s  ({len(c.raw):,} in {span:.1f}s, "
               "first send → last body)")
    m = r.stage_metrics
    records_in = m.get("gpu_stage_records_in_total", 0.0)
    busy, parse = m.get("gpu_stage_batch_seconds_sum", 0.0), m.get("gpu_stage_parse_seconds_sum", 0.0)
    batches = m.get("gpu_stage_batch_records_count", 0.0)
    if busy > 0 and parse > 0:
        yield (f"gpu_stage    {records_in / busy:>8,.0f} records/s while busy (batch first record → commit), "
               f"{records_in / parse:,.0f}/s parse+encode; {batches:.0f} batches, fed at the connector's pace")
    job = r.wall_s.get("feature job")
    if job:
        yield (f"feature job  {len(c.typed) / job:>8,.0f} records/s  ({len(c.typed):,} in {job:.1f}s including "
               f"the PyFlink start-up)")


def _latency(r: Report, c: Contents) -> Iterator[str]:
    sent = sent_at_ms(c.raw)
    seen = r.seen
    if seen is None:
        return
    e2e = [seen.typed_visible_ms[k] - sent[k] for k in seen.typed_visible_ms if k in sent]
    http = [float(x) for m in c.raw if (x := header_int(m, h.LATENCY_MS)) is not None]
    raw_wait = [seen.raw_visible_ms[m.key or b""] - x for m in c.raw
                if (x := header_int(m, h.RECEIVED_AT_MS)) is not None and (m.key or b"") in seen.raw_visible_ms]
    parse = [seen.typed_visible_ms[k] - seen.raw_visible_ms[k] for k in seen.typed_visible_ms
             if k in seen.raw_visible_ms]
    yield f"end to end   {_pct(e2e)}"
    yield "  (request first sent → typed record visible to a read_committed consumer)"
    yield f"  vLLM call incl. retries     {_pct(http)}"
    yield f"  body → raw committed        {_pct(raw_wait)}"
    yield f"  raw committed → typed       {_pct(parse)}"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def _features(r: Report) -> Iterator[str]:
    rows = sorted(r.features, key=lambda x: (x["window_start"], x["model"] or ""))
    yield f"{len(rows)} rows in the features topic (jobs.model_minute); first {min(6, len(rows))}:"
    yield (f"  {'window':<17} {'model':<16} {'req':>5} {'tokens':>7} {'lat ms':>7} {'length':>7} "
           f"{'invalid':>7} {'tool':>6}")
    for x in rows[:6]:
        yield (f"  {x['window_start'][:16]:<17} {x['model'] or '-':<16} {x['requests']:>5} "
               f"{x['total_tokens'] or 0:>7} {x['latency_ms_mean'] or 0:>7.0f} {x['length_share']:>7.1%} "
               f"{x['invalid_json_share']:>7.1%} {x['tool_call_share']:>6.1%}")


def render(r: Report) -> str:
    """The whole summary as text."""
    c = r.contents
    if c is None:
        return "no results"
    out = ["", "=" * 100, "llmpipe demo summary", "=" * 100]
    out += list(_counts(r, c))
    out += ["", f"backend      gpu_stage ran on: {r.backend.upper()} ({r.backend_why})", f"vLLM         {r.url}", ""]
    out += ["throughput", *[f"  {line}" for line in _throughput(r, c)], ""]
    out += ["latency", *[f"  {line}" for line in _latency(r, c)], ""]
    out += [*list(_features(r)), ""]
    out += ["checks"]
    out += [f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}" for name, ok, detail in r.verdict.results]
    out += [f"\nwall time {r.wall_s.get('total', 0):.0f}s; logs in the run folder's logs/", "=" * 100]
    return "\n".join(out)
