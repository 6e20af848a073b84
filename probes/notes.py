"""The notes probes attach to their results, each with a key.

A note is a plain string in English (what ``--json``, the journal and the
report keep), and also carries its key and values, so the chat and the
report can say it in the session's language from the assistant's catalog
(``assistant/session/render.py`` has every key below in English and Chinese; a test
checks both catalogs cover :data:`TEXT`). Values are already formatted
(sizes as text), so a translation only rearranges them.
"""
from __future__ import annotations

TEXT = {
    "search.best": "largest num_ctx measured to fit under {limit}: {best} ({why}; {loads} loads)",
    "search.none": "no context fits under {limit}: the first rung (num_ctx {first}) did not ({stop})",
    "search.why.cap_want": "the wanted context fits",
    "search.why.cap_trained": "the trained context fits",
    "search.why.cap_top": "the top fits",
    "search.why.converged": "num_ctx {fail} measured over",
    "search.why.trials": "stopped after {loads} loads",
    "search.why.unmeasured": "a peak could not be measured",
    "search.why.error": "a load failed for a reason other than memory",
    "ctx.clamped": "the model was trained for {trained} tokens: Ollama clamps a larger num_ctx ({want}) to it "
                   "without an error",
    "ctx.default": "a request without num_ctx gets the server default of {default} tokens ({engine} engine, "
                   "v{version}); longer input is cut there",
    "ctx.calibrated": "calibrated: peak = {intercept} + {slope} x KV cache; residual {residual}",
    "ctx.calibrated_model": "calibrated: peak = {intercept} + {slope} x (KV + compute); residual {residual}",
    "ctx.no_prediction": "no prediction for {model}: {error}",
    "quant.no_sibling": "no lower-bit sibling of {model} on the server (levels are read from `ollama show`, "
                        "not from tag names)",
    "quant.no_logprobs": "the server returns no token log-probabilities: coherence is judged on the text",
    "quant.predicted_over": "{tag}: not loaded: predicted to peak at {peak}, over the limit with margin ({limit})",
    "probe.spilled": "spilled to the CPU: only {vram} of {size} on the GPU",
    "backend.weights_alone": "weights alone (num_ctx {ctx}): {peak} — a diagnostic, not a setting to use",
    "backend.restart": "{assigns} ollama serve   (systemd: `systemctl edit ollama` -> [Service] Environment=...; "
                       "then restart)",
}


class Note(str):
    """``Note("ctx.default", default=4096, ...)``: the English text, with
    ``.key`` and ``.values`` for a translation."""

    key: str
    values: dict

    def __new__(cls, key: str, **values) -> "Note":
        note = super().__new__(cls, TEXT[key].format(**values))
        note.key, note.values = key, values
        return note

    def __reduce__(self):  # copies and pickles keep the text
        return (str, (str(self),))
