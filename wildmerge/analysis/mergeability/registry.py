"""The 28 metrics of Zhou et al. (arXiv 2601.22285, Table 1), by canonical key and category."""

CATEGORIES = {
    "task_vector": ["task_vector_cosine_similarity", "task_vector_l2_distance", "task_vector_dot_product",
                    "weight_space_angle", "task_vector_magnitude_ratio"],
    "effective_rank": ["effective_rank", "effective_rank_mergeability_score", "stable_rank", "spectral_gap",
                       "singular_value_ratio", "layerwise_effective_rank",
                       "layerwise_effective_rank_mergeability_score"],
    "subspace": ["singular_value_overlap", "subspace_overlap", "right_subspace_overlap_top_k",
                 "right_subspace_overlap_bottom_k", "interaction_matrix_overlap_top_k",
                 "interaction_matrix_overlap_bottom_k"],
    "activation": ["activation_l2_distance", "activation_cosine_similarity", "activation_magnitude_ratio",
                   "activation_dot_product"],
    "gradient": ["encoder_gradient_cosine_similarity", "encoder_gradient_l2_distance", "encoder_gradient_dot_product",
                 "input_gradient_cosine_similarity", "input_gradient_l2_distance", "input_gradient_dot_product"],
}
METRICS = [m for names in CATEGORIES.values() for m in names]
CATEGORY_OF = {m: c for c, names in CATEGORIES.items() for m in names}
# what each group of inputs yields: weights only, forward passes, forward + backward
GROUPS = {"weights": CATEGORIES["task_vector"] + CATEGORIES["effective_rank"] + CATEGORIES["subspace"],
          "activations": CATEGORIES["activation"], "gradients": CATEGORIES["gradient"]}
# the paper's reduced set (A.13.4): gradient and subspace metrics "capture most of the predictive power"
REDUCED = CATEGORIES["gradient"] + CATEGORIES["subspace"]

# Table 10 of the paper: per category, the primary operation, what it reads and the paper's cost class
COSTS = {
    "task_vector": ("weight arithmetic: one streamed pass over the base and the experts (norms, dot products)",
                    "weights only", "low"),
    "effective_rank": ("SVD of each expert's 2-D task-vector blocks (the sketches it shares with subspace)",
                       "weights only", "medium"),
    "subspace": ("SVD of each expert's 2-D task-vector blocks (the sketches it shares with effective rank)",
                 "weights only", "medium"),
    "activation": ("forward passes of every expert on the pooled calibration items", "unlabelled items (prompts)",
                   "medium"),
    "gradient": ("forward + backward passes: each expert on its own items (encoder), every expert on the pooled "
                 "items (input)", "labelled items (prompt and answer)", "high"),
}

assert len(METRICS) == 28
