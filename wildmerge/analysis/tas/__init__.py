"""The task alignment score (TAS): a merge's features against each expert's on unlabelled data, swept over a
method's grid without writing checkpoints, used to tune hyperparameters without evaluation and checked against
accuracy."""
