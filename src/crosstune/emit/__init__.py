"""Every file crosstune writes is a serialised value, never text with values formatted into its syntax: one emitter
per format (docs/DESIGN_NOTES.md, "crosstune.emit").

- YAML (recipes, job specs, accelerate's config): `yaml_text`, PyYAML's safe_dump with a quoting rule both YAML
  readers agree on, checked by reading the text back; head comments through `comment_lines`.
- Shell (Slurm's script, the command lines crosstune prints): `shell_line`, crosstune's own template with every value
  a `shlex.quote`d word.
- JSON: the json module's encoder (`json.dumps`) wherever JSON is written; nothing of ours stands between. A file
  written for another tool (LLaMA-Factory's dataset_info.json) goes through `json_text`, that encoder with what JSON
  can't hold (NaN, a key that is not a string) refused.
- HTML: crosstune.report.html, every text through `html.escape`.
crosstune writes no TOML.
"""

from crosstune.emit.comments import comment_lines
from crosstune.emit.json_emitter import json_text
from crosstune.emit.shell_emitter import Raw, shell_line, shell_word, shell_words
from crosstune.emit.yaml_emitter import yaml_text

__all__ = ["Raw", "comment_lines", "json_text", "shell_line", "shell_word", "shell_words", "yaml_text"]
