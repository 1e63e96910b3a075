"""Method recipes, the one place a merge's recipe is put together.

``method.py`` loads a method recipe (``merge_recipes/methods/<name>.yml``) and knows its hyperparameters and merge
ids; ``labels.py`` its label and row in tables (from the recipe files); ``render.py`` fills it in with a base,
experts and hyperparameters (a run's merge also with the tokenizer plan of ``tokenizer.py`` and each layer-wise
expert's own data); ``sweeps.py`` the named sweeps of a method's hyperparameters; ``recipe_file.py`` checks a
user's complete mergekit recipe file before mergekit reads it. Sampling, merging, evaluation and analysis read
recipes from here; the merge methods themselves (``plugins/``) know nothing of them.
"""
