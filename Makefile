# Aliases for ./dev, the set-up-and-go script (README.md). ./dev needs nothing but bash.
.PHONY: run test bench setup clean
run:
	./dev run
test:
	./dev test
bench:
	./dev bench
setup:
	./dev setup
clean:
	rm -rf .venv .mypy_cache .pytest_cache .ruff_cache .hypothesis
