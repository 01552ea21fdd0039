"""A stand-in for torch 2.6.0's `torch._inductor.select_algorithm`, the surface xmfu's Inductor record touches.

Copied in shape from the torch-2.6.0 wheel's torch/_inductor/select_algorithm.py (PyPI, cp310 manylinux):
- no `get_algorithm_selector_cache()`: the cache is the module global `_ALGORITHM_SELECTOR_CACHE`, None until
  `add_feedback_saver` or `autotune_select_algorithm` makes it;
- `AlgorithmSelectorCache` has `feedback_saver_fns` and `add_feedback_saver`, and no preprocessing hook
  (`add_preprocessing_fn`, `preprocessing_fns` came later);
- `__call__(self, name, choices, input_nodes, layout, input_gen_fns=None, ...)` drops None choices, returns a
  single choice without benchmarking (`return choices[0].output_node()`), else benchmarks, calls each feedback
  saver as `feedback_fn(timings, name, input_nodes, choices)` (four arguments) and keeps the fastest.
The benchmark here is `timings`, a dict the test gives: {choice: ms}.
"""

from __future__ import annotations

from typing import Any


class AlgorithmSelectorCache:
    def __init__(self, timings: dict[Any, float] | None = None) -> None:
        self.feedback_saver_fns: list[Any] = []
        self.timings = timings or {}

    def __call__(self, name: str, choices: list, input_nodes: list, layout: Any, input_gen_fns: Any = None,
                 precompilation_timeout_seconds: int = 3600, return_multi_template: bool = False) -> Any:
        choices = [choice for choice in choices if choice is not None]
        if len(choices) == 1:
            return choices[0]
        timings = {choice: self.timings[choice] for choice in choices}
        for feedback_fn in self.feedback_saver_fns:
            feedback_fn(timings, name, input_nodes, choices)
        return min(timings, key=timings.__getitem__)

    def add_feedback_saver(self, fn: Any) -> None:
        self.feedback_saver_fns.append(fn)


_ALGORITHM_SELECTOR_CACHE: AlgorithmSelectorCache | None = None


def autotune_select_algorithm(*args: Any, **kwargs: Any) -> Any:
    global _ALGORITHM_SELECTOR_CACHE
    if _ALGORITHM_SELECTOR_CACHE is None:
        _ALGORITHM_SELECTOR_CACHE = AlgorithmSelectorCache()
    return _ALGORITHM_SELECTOR_CACHE(*args, **kwargs)


def add_feedback_saver(fn: Any) -> None:
    global _ALGORITHM_SELECTOR_CACHE
    if _ALGORITHM_SELECTOR_CACHE is None:
        _ALGORITHM_SELECTOR_CACHE = AlgorithmSelectorCache()
    _ALGORITHM_SELECTOR_CACHE.add_feedback_saver(fn)
