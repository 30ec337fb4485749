"""rayd's benchmark suite (not part of the installed package); see benchmarks/README.md."""
