"""lm-eval's Jinja prompt templates compiled once per process instead of once per document.

lm-eval 0.4's ``utils.apply_template`` calls ``env.from_string(template)`` for every ``doc_to_text`` /
``doc_to_choice`` / ``doc_to_target`` of every document of every job: parsing and compiling the same few templates
again and again was a third of a long-lived worker's time on the demo main job (profiled). A compiled template is
stateless (each ``render`` gets a fresh context), so rendering a cached one gives the same text.
"""

import functools

from wildmerge.plugins import host_patches


@functools.lru_cache(maxsize=4096)
def compiled_template(template: str):
    """``template`` compiled in lm-eval's own environment (its filters, ``StrictUndefined``), once."""
    from lm_eval import utils

    return utils.env.from_string(template)


def apply_template(template: str, doc: dict) -> str:
    """lm-eval's ``apply_template`` on the cached compiled template."""
    return compiled_template(template).render(**doc)


def compile_templates_once() -> None:
    """Make lm-eval render every template through ``compiled_template`` (once; ``host_patches``:
    lm_eval.utils.apply_template)."""
    host_patches.replace("lm_eval.utils.apply_template", lambda original: apply_template)
