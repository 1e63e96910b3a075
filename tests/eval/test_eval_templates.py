"""lm-eval's work done once per process: prompt templates compiled once (the same text as lm-eval's own
per-document compile, errors included), and a long-lived worker's environment described once."""

import pytest

from wildmerge.eval import templates

DOCS = [
    {"prompt": "Q: 11+3=\nA:", "choices": ["12", "14", "13", "25"], "gold": 1, "answer": "14"},
    {"prompt": "Q: {{not a template}}\n", "choices": ["a'b", 'c"d', "", "\u00e9"], "gold": 0, "answer": " 0 "},
]
TEMPLATES = [
    "{{prompt}}",  # the demo family's doc_to_text
    "{{choices}}",  # its doc_to_choice: a list rendered, then read back by lm-eval with ast.literal_eval
    "{{choices[gold]}}",
    "{{prompt | regex_replace('[0-9]+', 'N')}} {{answer | trim}}\n",  # lm-eval's own filter, a trailing newline
    "{% for c in choices %}{{loop.index}}. {{c}}\n{% endfor %}Answer:",
]


def reference(template, doc):
    """lm-eval 0.4's apply_template as written: a fresh compile in its environment for every call."""
    from lm_eval import utils

    return utils.env.from_string(template).render(**doc)


def test_cached_templates_render_as_lm_eval_does():
    for template in TEMPLATES:
        for doc in DOCS:
            for _ in range(3):  # the cached form, reused, stays the same
                assert templates.apply_template(template, doc) == reference(template, doc)


def test_each_template_is_compiled_once():
    templates.compiled_template.cache_clear()
    for _ in range(50):
        for doc in DOCS:
            templates.apply_template("{{prompt}}|{{gold}}", doc)
    info = templates.compiled_template.cache_info()
    assert (info.misses, info.hits) == (1, 99)


def test_a_missing_field_still_fails_as_in_lm_eval():
    from jinja2.exceptions import UndefinedError

    with pytest.raises(UndefinedError):
        reference("{{question}}", DOCS[0])
    with pytest.raises(UndefinedError):
        templates.apply_template("{{question}}", DOCS[0])


def test_lm_eval_tasks_render_through_the_cache():
    from lm_eval import utils
    from lm_eval.api import task as task_module

    original = utils.apply_template
    try:
        templates.compile_templates_once()
        templates.compile_templates_once()  # idempotent
        assert utils.apply_template is templates.apply_template
        templates.compiled_template.cache_clear()
        # lm-eval's tasks look apply_template up on the module at every call, so they get the cached one
        assert task_module.utils.apply_template("{{prompt}}", DOCS[0]) == DOCS[0]["prompt"]
        assert templates.compiled_template.cache_info().misses == 1
    finally:
        utils.apply_template = original


def test_a_workers_environment_is_described_once():
    import lm_eval.evaluator

    from wildmerge.eval.serve import cache_env_info, described_once

    calls = []
    own = lm_eval.evaluator.add_env_info

    def counted(storage):
        calls.append(1)
        own(storage)

    add_env_info = described_once(counted)
    first, second = {"results": {}}, {}
    add_env_info(first)
    add_env_info(second)
    assert len(calls) == 1 and "pretty_env_info" in second
    assert first == {"results": {}, **second}  # every job's record gets what lm-eval wrote once
    try:
        cache_env_info()
        ours = lm_eval.evaluator.add_env_info
        cache_env_info()  # once per process
        assert ours is lm_eval.evaluator.add_env_info and ours is not own
    finally:
        lm_eval.evaluator.add_env_info = own

