"""`harness.experimental.client` IS `harness.client` (Determined's import path).

The module replaces itself in `sys.modules` with `harness.client`, so every spelling gives the
same module: `import determined.experimental.client` first and a later
`from determined.experimental import client` once returned this thinner re-export instead
(the import system sets the package attribute to what it loads), without `get_model` & co.
"""

import sys

from harness import client as _client

sys.modules[__name__] = _client
