"""`crosstune pretrain`: the demo's small Gemma 4 base, trained in full on CPU on the base's Verilog task kinds, cached
by content hash; the default base ships in pretrained/."""
