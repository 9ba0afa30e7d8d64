"""Guard torchvision 0.28.0's two unguarded ``torch.library.register_fake`` calls, which fail against the
CPU build of torch 2.13 when SGLang imports torchvision through a multimodal config module. Idempotent.

    python live/sglang_cpu/patch_torchvision.py <site-packages>/torchvision/_meta_registrations.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "# servetwin: guarded"


def patch(path: Path) -> bool:
    text = path.read_text()
    if MARK in text:
        return False
    pattern = re.compile(r'^@torch\.library\.register_fake\((.*)\)\n', re.M)
    new, n = pattern.subn(lambda m: f"@(torch.library.register_fake({m.group(1)}) if torchvision.extension._has_ops() "
                                    f"else (lambda f: f))  {MARK}\n", text)
    path.write_text(new)
    return n > 0


if __name__ == "__main__":
    changed = patch(Path(sys.argv[1]))
    print("patched" if changed else "already patched or nothing to patch")
