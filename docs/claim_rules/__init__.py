"""One module per claim of docs/claims.md: what it simulates, its verdict rule and its table.

Each exposes `run(ctx, spec) -> (verdict, body)`, where `spec` is docs/claims/<id>.yaml (title,
quotes, grids, scenarios); docs/build_claims.py assembles the page.
"""
