"""Generic testing support for generated strategies and property tests: recipes, comparisons, oracles."""
