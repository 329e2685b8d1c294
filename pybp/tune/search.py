"""Per-device tuning: candidates, verification, timing, within a time budget; the
winners are saved as the device's profile (``pybp.cl.profiles``) as they are found, and
the profiler reads them from then on."""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np

from pybp.parallel import profiler
from pybp.tune import BUDGET, BUDGETS, SIZE, SIZES
from pybp.cl.device import describe, new_context, select_device
from pybp.parallel.params import (
    CACHE_MODES,
    CONSTANT_MODES,
    ROUNDINGS,
    SETTINGS,
    SLICES_PER_PASS,
    TEXTURE_KERNELS,
)
from pybp.cl.profiles import load_profile, profile_path, save_profile, setting_key
from pybp.api.sinograms import Backprojector
from pybp.parallel.prepare import check

UNROLLS = (1, 2, 4, 8)
# A winner replaces the current choice only where, timed again beside it in turns, it is
# this much faster: on a 2-core CPU, 5 calls of a 256^2 case timed one candidate at 0.62
# GU/s that then ran at 0.29-0.32 against the current choice's 0.42-0.49.
CONFIRM_ROUNDS, CONFIRM_MARGIN = 3, 0.03


ALU_SHAPES = (dict(square=64, items=256, items_per_row=32),  # n_q = 16
              dict(square=32, items=256, items_per_row=16),  # n_q = 4
              dict(square=32, items=128, items_per_row=16))  # n_q = 8


def candidates(interpolation, families=("texture", "alu")):
    """Parameter candidates: texture (kernel, constant caching, unroll) and ALU
    (square and work-group shape, cached projections, cache mode, rounding, unroll)."""
    if "texture" in families:
        for kernel, constants, unroll in itertools.product(TEXTURE_KERNELS, CONSTANT_MODES, UNROLLS):
            if constants == "local" and kernel != "multiproj":
                continue
            yield dict(kernel=kernel, constants=constants, unroll=unroll)
    if "alu" in families:
        caches = CACHE_MODES if interpolation == "linear" else ("plain",)
        for shape, cached, cache, rounding, unroll in itertools.product(
                ALU_SHAPES, (8, 16, 32), caches, ROUNDINGS, (1, 4)):
            yield dict(kernel="alu", **shape, cached_projections=cached, cache=cache,
                       rounding=rounding, unroll=unroll)


def gups(backprojector, stack, repeats=5):
    """GU/s of one call on ``stack``: the median kernel time of ``repeats`` calls after
    a warm-up (docs/design.md, section 5)."""
    backprojector(stack)
    times = []
    for _ in range(repeats):
        backprojector(stack)
        times.append(backprojector.last_kernel_seconds)
    return backprojector.geometry.updates(len(stack)) / float(np.median(times)) * 1e-9




def confirmed(current, candidate, rounds=CONFIRM_ROUNDS, margin=CONFIRM_MARGIN) -> tuple:
    """``(kept, current speed, candidate speed)``: ``current()`` and ``candidate()``
    (each returns a speed) run in turns ``rounds`` times, the medians compared; the
    candidate is kept only where it beats the current choice by ``margin``."""
    speeds = [], []
    for _ in range(rounds):
        speeds[0].append(current())
        speeds[1].append(candidate())
    now, new = (float(np.median(s)) for s in speeds)
    return new > now * (1 + margin), now, new


def default_size(device) -> int:
    """Bins and slice width timed: 2048 (the paper's case), 256 on a CPU."""
    return SIZES.get(device.type, SIZE)


def default_budget(device) -> float:
    """Seconds a search may take: 15 minutes, 3 on a CPU."""
    return BUDGETS.get(device.type, BUDGET)


def schedule(settings, families, first_family="alu"):
    """Every ``(setting, values)`` to try, in the order tried: each setting's default
    (``values`` None) first, so that a search stopped early has measured every
    setting as shipped and ``auto`` compares like with like; then the candidates of
    all settings in turn, those of ``first_family`` (the default's) first."""
    order_families = sorted(families, key=lambda f: f != first_family)
    queues = [[(setting, values) for family in order_families
               for values in candidates(setting[1], (family,))]
              for setting in settings]
    order = [(setting, None) for setting in settings]
    for k in range(max(map(len, queues), default=0)):
        order += [queue[k] for queue in queues if k < len(queue)]
    return order


def tune(device=None, size=None, settings=None, repeats=5, families=("texture", "alu"),
         budget=None, log=print, progress=True):
    """Search the candidates on a device within ``budget`` seconds; return the best
    of each setting that beats the current choice, saved to the device's profile.

    Every candidate is first judged against the float64 reference on the check case
    (``pybp.parallel.verify``); one that fails is reported and skipped, never timed. A device
    that matches nothing raises ``ValueError`` before any work. Each setting's current
    choice (its default, or what a profile chose) is timed first; when the budget is
    spent, each setting's best is timed again beside it, in turns (:func:`confirmed`),
    and saved only where it is faster (the profile is rewritten atomically). Ctrl-C
    stops the search and keeps the profile as it was. ``progress`` shows the count, the
    best so far and the time left.
    """
    cl_device = select_device(device)
    description = describe(cl_device)
    context = new_context(cl_device)
    size = size or default_size(description)
    budget = budget or default_budget(description)
    family = "alu" if profiler.architecture(description).kernels[1] == "alu" else "texture"
    order = schedule(settings or SETTINGS, families, family)
    rng = np.random.default_rng(0)
    angles = np.linspace(0, np.pi, size, endpoint=False)
    data = rng.random((max(SLICES_PER_PASS), size, size)).astype(np.float32)
    winners, path = {}, profile_path(description)
    log(f"tuning {description.name}: {len(order)} candidates for {len(settings or SETTINGS)} "
        f"setting(s) at {size}x{size}, within {budget:.0f} s; saving to {path}")
    # The budget keeps room for timing each setting's best again beside its current
    # choice (CONFIRM_ROUNDS of each, about as long as two candidates' timing).
    settings_count = len(settings or SETTINGS)
    bar = Bar(len(order), budget, enabled=progress, reserve=2 * settings_count)
    log = bar.wrap(log)
    current = {}  # setting -> (params, speed) of its current choice (the first timed)
    existing = load_profile(description)
    try:
        for done, (setting, values) in enumerate(order):
            if not bar.time_for_another():
                log(f"budget of {budget:.0f} s spent: {done} of {len(order)} candidates tried")
                break
            key = setting_key(*setting)
            result = _try(context, size, angles, data, repeats, *setting, values, log)
            if values is None and result is not None:
                current[setting] = (existing.get(key, result[0]), result[1])
            elif result is not None and result[1] > max(
                    current.get(setting, (None, 0.0))[1],
                    winners.get(setting, {}).get("gups", 0.0)):
                winners[setting] = {"params": result[0], "gups": float(f"{result[1]:.4g}")}
            best = winners.get(setting) or (
                {"gups": float(f"{current[setting][1]:.4g}")} if setting in current else None)
            bar.update(done + 1, key, best)
        bar.close()
        kept, timed = _confirm(context, size, angles, data, repeats, winners, log)
    except KeyboardInterrupt:
        bar.close()
        log(f"interrupted: the profile is as it was ({path})")
        raise
    # Each setting timed keeps its current choice, with the speed measured here (what
    # slices_per_pass="auto" compares), unless a faster set was kept.
    entries = {setting_key(*setting): {"params": params,
                                       "gups": float(f"{timed.get(setting, speed):.4g}")}
               for setting, (params, speed) in current.items()}
    entries.update(kept)
    if entries:
        save_profile(description, entries)
    if kept:
        log(f"saved {path}")
    else:
        log(f"nothing faster than the current choices: they stay ({path})")
    return kept


def _confirm(context, size, angles, data, repeats, winners, log) -> tuple:
    """``(kept, timed)``: the profile entries of ``winners`` (setting -> best) that
    beat their setting's current choice timed again beside them (:func:`confirmed`), by
    setting key; the current choices' speeds timed so, by setting."""
    kept, timed = {}, {}
    for setting, entry in sorted(winners.items()):
        slices, interpolation, storage = setting
        common = dict(context=context, interpolation=interpolation, slices_per_pass=slices,
                      precision=storage, verify=False)
        params = entry["params"]
        chosen = dict(common, kernel=params["kernel"],
                      overrides={k: v for k, v in params.items() if k != "kernel"})
        with Backprojector(size, angles, **common) as now, \
                Backprojector(size, angles, **chosen) as new:
            better, was, found = confirmed(lambda: gups(now, data[:slices], repeats),
                                           lambda: gups(new, data[:slices], repeats))
        key = setting_key(*setting)
        log(f"{key}: {new.params.key()} {found:.4g} GU/s against the current "
            f"{now.params.key()} {was:.4g}, in turns: {'kept' if better else 'not kept'}")
        timed[setting] = was
        if better:
            kept[key] = dict(entry, gups=float(f"{found:.4g}"))
    return kept, timed


def _try(context, size, angles, data, repeats, slices, interpolation, storage, values, log):
    """``(profile params, GU/s)`` of one candidate (None: the setting's default), or
    None where it does not fit the device or fails verification."""
    options = dict(context=context, interpolation=interpolation, slices_per_pass=slices,
                   precision=storage, verify=False)  # judged on the check case below
    if values is not None:
        options.update(kernel=values["kernel"],
                       overrides={k: v for k, v in values.items() if k != "kernel"})
    try:
        verdict, small = check(options)
    except ValueError as exc:  # does not fit this device
        log(f"  {values}: skipped ({exc})")
        return None
    if not verdict.passed:
        log(f"  {small.params.key()}: wrong ({verdict}); skipped")
        return None
    with Backprojector(size, angles, **options) as big:
        speed = gups(big, data[:slices], repeats)
        log(f"  {big.params.key()}{'' if values else ' (default)'}: {speed:8.2f} GU/s")
        return (values or {"kernel": big.params.kernel}), speed


class Bar:
    """The search's progress on standard error: candidates done, the best GU/s so far
    and the time left; it also decides whether another candidate fits the budget."""

    def __init__(self, total, budget, enabled=True, stream=sys.stderr, reserve=0):
        self.total, self.budget, self.enabled, self.stream = total, budget, enabled, stream
        self.reserve = reserve  # candidates' time kept for after the search
        self.start, self.done = time.perf_counter(), 0
        self.line = ""  # the bar as last drawn

    def time_for_another(self) -> bool:
        """Whether a candidate taking the mean time so far ends within the budget, with
        ``reserve`` candidates' time left after it."""
        elapsed = time.perf_counter() - self.start
        mean = elapsed / self.done if self.done else 0.0
        return elapsed + mean * (1 + self.reserve) <= self.budget or self.done < 1

    def update(self, done, key, best):
        """``done`` candidates tried; the last was of setting ``key``, whose best so
        far is ``best`` (a profile entry, or None)."""
        self.done = done
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        left = min(self.budget - elapsed, elapsed / done * (self.total - done))
        shown = f"{key} best {best['gups']:g} GU/s" if best else f"{key}: none verified yet"
        filled = int(20 * done / self.total)
        self.line = (f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total} candidates, "
                     f"{shown}, {max(0.0, left):.0f} s left")
        print("\r" + self.line, end="", file=self.stream, flush=True)

    def wrap(self, log):
        """``log`` that first clears the bar's line and then draws it again below."""
        if not self.enabled:
            return log

        def wrapped(*args):
            if self.line:
                print("\r" + " " * len(self.line) + "\r", end="", file=self.stream, flush=True)
            log(*args)
            if self.line:
                print(self.line, end="", file=self.stream, flush=True)
        return wrapped

    def close(self):
        if self.enabled and self.line:
            print(file=self.stream, flush=True)
            self.line = ""
