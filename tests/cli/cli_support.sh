# Sourced by the CLI tests: a scratch directory removed on exit, `check` and `finish` from
# check.sh, `one_line FILE TEXT` and `write_tiny_gpt FILE` (a 2-layer GPT on synthetic
# tokens, 4 blocks, batch 8 in 4 microbatches).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
one_line() {  # one_line FILE TEXT: FILE is a single line holding TEXT
  [ "$(wc -l < "$1")" -eq 1 ] && grep -q -F -- "$2" "$1"
}
write_tiny_gpt() {  # write_tiny_gpt FILE
  cat > "$1" <<'TOML'
[model]
kind = "gpt"
layers = 2
d_model = 32
heads = 2
seq = 16
[data]
source = "synthetic"
[train]
batch = 8
microbatches = 4
steps = 5
TOML
}
