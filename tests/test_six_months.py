"""What a user six months into a vault ran into: hand edits, old episodes, a changed model, killed work."""
from __future__ import annotations

from memvault.rules import frontmatter_edit as fm


def test_a_key_given_twice_by_hand_takes_the_new_value_when_it_is_changed():
    # A person's editor left "importance" twice; YAML reads the last. `fact set --importance 0.1` rewrote only the
    # first line and said "set", while the file still read 0.9: the change asked for was silently not made.
    doc = fm.parse("---\ncategory: redis\nimportance: 0.2\nowner: maria\nimportance: 0.9\n---\nEviction is allkeys-lru.\n")
    assert doc.meta["importance"] == 0.9
    changed = fm.update(doc, {"importance": 0.1}, [], doc.body)
    again = fm.parse(changed.render())
    assert again.meta["importance"] == 0.1
    assert changed.fm_lines == ["category: redis", "importance: 0.1", "owner: maria"]
