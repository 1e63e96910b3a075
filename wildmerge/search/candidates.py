"""A candidate's id: its method and its experts, short and safe as a folder name (``ta__e01+e03``)."""


def candidate_id(candidate: dict) -> str:
    from wildmerge.recipes.method import safe_name

    return safe_name(f"{candidate['method']}__" + "+".join(e.replace("expert_", "e") for e in candidate["experts"]))
