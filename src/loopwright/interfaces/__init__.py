"""What a person uses: the `loopwright` command (`cli`, `runs`, `common`), the HTML trace
viewer, and the demo tools the command offers when none are given.

Everything here sits on top of the library; nothing below imports it."""
