"""The warning a benchmark's summary carries when it was measured on a busy machine (its script's
--force, or its *_BENCH_FORCE=1): a banner at the top and a line at the end, so that the figures
between are never quoted as quiet-machine ones. Imported by cpu.py and postgres.py."""


def banner(p, a, force_variable):
    """The top banner, when `a.forced` (why the run was forced) is set; `p` appends a line."""
    if not a.forced:
        return
    bar = "!" * 100
    p(bar)
    p(f"!!! BUSY MACHINE, NOT COMPARABLE: the 1-minute load average was above {a.max_load}")
    p(f"!!! ({a.forced}); measured anyway because of --force / {force_variable}=1.")
    p("!!! These are not quiet-machine figures: the machine's other work is in every one of them.")
    p(bar)
    p("")


def footer(p, a):
    """The closing line, when `a.forced` is set."""
    if a.forced:
        p("")
        p("!!! BUSY MACHINE (forced): not quiet-machine figures, not comparable with other runs.")
