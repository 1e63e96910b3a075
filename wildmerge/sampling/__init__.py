"""What a run merges, as data: the pool, the in-the-wild subsets, the plan (subsets x methods x hyperparameters), the
manifest, LoRA adapters folded into full experts, and the checks before anything is merged (dry run, pre-flight)."""
