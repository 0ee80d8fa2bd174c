"""A request's scope resolved against the served model (``policy.scope.resolve``), in any process.

The HTTP layer resolves it to answer a bad marker with a 400; the scheduler resolves it again to
build the request's device row (it never trusts its input). Both read the same two things of the
served model: its tokenizer (markers must be single tokens) and SGLang's reasoning parser
(``--reasoning-parser``: the think start and end tokens, and whether the parser takes a response
to start inside the reasoning span, as ``force_reasoning`` parsers do). Resolutions are cached
per scope (a handful of distinct scopes per server).

Mixed chunked prefill (``--enable-mixed-chunk`` with chunked prefill on, for the algorithms SGLang keeps
it for: EAGLE, EAGLE3, DSPARK, DFLASH) runs a step that prefills new requests and decodes each running
request by one plain target token, outside the verify step. The device scope state advances only in
verify steps (``ledger_table``: ``produced`` and the span state are written back by the verify round),
so such a token is never seen: for a strict prefix and for the accrual of ``asd_budget_per_token`` that
only undercounts the output (the prefix stays strict longer, the allowance grows slower: both
conservative), but a think end or a span's open marker committed there would go unseen and relax
where the scope forbids. So on such a server a scope with markers (``asd_scope: "reasoning"``,
``asd_strict_spans``) is refused: a 400 at admission, one line at start-up for the server's own.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

from sglang_asd.policy.scope import Markers, ReasoningMarkers, Scope, resolve, single_token_id

logger = logging.getLogger(__name__)


def mixes_decode(server_args) -> bool:
    """Whether SGLang runs mixed prefill/decode steps on this server (what the scheduler's
    ``is_mixed_chunk`` becomes): ``enable_mixed_chunk`` with chunked prefill on, for a speculative
    algorithm SGLang keeps mixing for (``SpeculativeAlgorithm.supports_mixed_chunk``; it turns the flag
    off at launch for the others, so the raw flag read before launch would overstate it)."""
    size = getattr(server_args, "chunked_prefill_size", None)
    if not (getattr(server_args, "enable_mixed_chunk", False) and size is not None and size > 0):
        return False
    algorithm = getattr(server_args, "speculative_algorithm", None)
    if algorithm is None:
        return False  # no verify step: nothing for a scope to see
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm.from_string(algorithm).supports_mixed_chunk()


def served_reasoning_parser(server_args) -> Optional[str]:
    """The reasoning parser in effect in this process: SGLang resolves ``--reasoning-parser auto`` once at
    start-up (from the chat template, else the architecture; ``None`` when it detects none) into the
    config it publishes to every process, and leaves the field as the operator passed it, so reading
    ``server_args.reasoning_parser`` would give ``"auto"``. Read as SGLang's own readers do (the tokenizer
    manager's ``config_value``, the scheduler's ``get_serving()``); the field where nothing is published
    (a process SGLang did not start)."""
    try:
        from sglang.srt.runtime_context import get_context

        return get_context().config_leaf("reasoning_parser")
    except (ImportError, ValueError):
        return getattr(server_args, "reasoning_parser", None)


def resolve_reasoning_parser(server_args) -> Optional[str]:
    """What ``--reasoning-parser auto`` will resolve to, before SGLang starts: SGLang's own resolution
    (``resolve_once``, ``resolve_auto_parsers``) run on a copy of ``server_args``, which it leaves as it
    was. Any other value is returned as it is."""
    if getattr(server_args, "reasoning_parser", None) != "auto":
        return getattr(server_args, "reasoning_parser", None)
    import copy

    from sglang.srt.parser.template_detection import resolve_auto_parsers
    from sglang.srt.server_args import resolving_view

    trial = copy.deepcopy(server_args)
    trial.resolve_once()
    resolve_auto_parsers(trial)
    return resolving_view(trial).reasoning_parser


class ScopeVocab:
    """The served model's markers: ``tokenizer`` (None: skip-tokenizer-init, every span refused),
    the name of SGLang's reasoning parser (None: no ``--reasoning-parser``), and whether the server
    decodes tokens outside the verify step (``mixed_decode``: mixed chunked prefill, which refuses
    scopes with markers; see the module's docstring)."""

    def __init__(self, tokenizer, reasoning_parser: Optional[str], mixed_decode: bool = False):
        self.tokenizer = tokenizer
        self.reasoning_parser = reasoning_parser
        self.mixed_decode = mixed_decode
        self._token_id = single_token_id(tokenizer) if tokenizer is not None else (lambda text: None)

    @functools.cached_property
    def reasoning(self) -> Optional[ReasoningMarkers]:
        """The reasoning span's markers, or None without a reasoning parser. Raises ValueError when
        the parser's think end (or, for a parser that does not start inside, its think start) is
        not a single token of the served tokenizer."""
        if not self.reasoning_parser:
            return None
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        detector = ReasoningParser(model_type=self.reasoning_parser, stream_reasoning=False,
                                   tokenizer=self.tokenizer).detector
        inside = bool(getattr(detector, "force_reasoning", False))
        start = self._token_id(detector.think_start_token) if detector.think_start_token else None
        end = self._token_id(detector.think_end_token) if detector.think_end_token else None
        if end is None or (start is None and not inside):
            raise ValueError(f"asd_scope='reasoning' needs the reasoning parser's think markers "
                             f"({detector.think_start_token!r}, {detector.think_end_token!r} of "
                             f"--reasoning-parser {self.reasoning_parser}) to be single tokens of the served "
                             f"tokenizer, which they are not")
        return ReasoningMarkers(start=start, end=end, starts_inside=inside)

    @functools.lru_cache(maxsize=64)
    def markers(self, scope: Scope) -> Markers:
        """``scope`` resolved; raises ValueError naming the field and the value."""
        if self.mixed_decode and (scope.scope == "reasoning" or scope.strict_spans):
            field, value = (("asd_scope", "'reasoning'") if scope.scope == "reasoning"
                            else ("asd_strict_spans", repr([list(span) for span in scope.strict_spans])))
            raise ValueError(f"{field}={value} needs a server without mixed chunked prefill: this one runs "
                             f"--enable-mixed-chunk, whose mixed steps decode tokens outside the verify step, "
                             f"where a marker would go unseen (asd_strict_prefix is served)")
        reasoning = self.reasoning if scope.scope == "reasoning" else None
        return resolve(scope, self._token_id, reasoning)


def launcher_vocab() -> Optional[ScopeVocab]:
    """The HTTP server process's vocabulary (SGLang's tokenizer manager), or None before it exists."""
    try:
        from sglang.srt.entrypoints.http_server import get_global_state
    except ImportError:
        return None
    state = get_global_state()
    manager = getattr(state, "tokenizer_manager", None)
    if manager is None:
        return None
    vocab = getattr(manager, "_asd_scope_vocab", None)
    if vocab is None:
        vocab = ScopeVocab(getattr(manager, "tokenizer", None), served_reasoning_parser(manager.server_args),
                           mixes_decode(manager.server_args))
        manager._asd_scope_vocab = vocab
    return vocab


def scheduler_vocab(scheduler) -> ScopeVocab:
    """The scheduler's vocabulary (its tokenizer and server arguments), made once per scheduler."""
    vocab = getattr(scheduler, "_asd_scope_vocab", None)
    if vocab is None:
        vocab = ScopeVocab(getattr(scheduler, "tokenizer", None), served_reasoning_parser(scheduler.server_args),
                           bool(getattr(scheduler, "is_mixed_chunk", mixes_decode(scheduler.server_args))))
        scheduler._asd_scope_vocab = vocab
    return vocab
