"""Chain of Merges' importance weights against the accuracy gap, their reference ablation, FLOPs and memory."""
