"""The knowledge and the logic that needs no engine, network or terminal: the matrix, targets, rules, the resolver."""
