"""SGLang's RadixCache: a token-granular compressed trie over token ids (one KV slot per token).

- ``match_prefix`` walks from the root, splitting a node where the match ends inside it, and refreshes
  every visited node's access. SGLang stamps ``last_access_time = time.time()`` node by node, so no two
  accesses tie; here an access counter (``touched``) orders them, which within one simulated instant keeps
  the order in which the engine would have touched the nodes.
- A node keeps its key's bytes too (``kb``): matching a whole node is then one ``bytes.startswith`` (memcmp) and
  only the node where a match ends is counted token by token (``common_prefix_len``).
- ``insert`` adds the unmatched remainder as a new leaf and returns the length already present
  (the caller frees its duplicate slots for that range).
- ``inc_lock_ref`` / ``dec_lock_ref`` walk up to the root; a node with ``lock_ref == 0`` is evictable.
- ``evict(n)`` frees whole unlocked leaves in least-recently-used order, tails first, until at least n
  tokens are freed; it runs only when an allocation would fail. The leaves are kept as the tree changes
  (SGLang collects them by walking the tree at each eviction; the order is the same).

Contract: ``evictable_size + protected_size == total_size``; locked nodes are never evicted;
``check_integrity()`` verifies both by walking the tree.
"""

from __future__ import annotations

import heapq

import numpy as np

from simulator.kernels import common_prefix_at, token_buffer, token_bytes
from simulator.trees import descendants


class Node:
    __slots__ = ("children", "parent", "key", "kb", "lock_ref", "touched", "stamp")

    def __init__(self, key: np.ndarray, parent: Node | None, touched: int, stamp: int = 0):
        self.children: dict[int, Node] = {}
        self.parent = parent
        self.kb, self.key = token_buffer(key)     # its bytes (a whole-node match is one memcmp), read as tokens
        self.lock_ref = 0
        self.touched = touched             # the access counter at its last access (larger: more recent)
        self.stamp = stamp                 # the tree's version when this node was made, split or removed

    @property
    def is_leaf(self) -> bool:
        return not self.children


class RadixCache:
    def __init__(self) -> None:
        self.root = Node(np.zeros(0, dtype=np.int32), None, 0)
        self.root.lock_ref = 1
        self.total_size = 0
        self.evictable_size = 0
        self._clock = 0
        self._leaves: dict[Node, None] = {}     # every leaf but the root, locked or not
        self.version = 0                         # bumped whenever a node is made, split or removed
        # A match that made no node depends only on the nodes it walked (their keys and links: a node's ``stamp``
        # moves when it is split or removed) and on the last one having no child for the key's next token, so it
        # holds while both do (``path_unchanged``).

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    @property
    def protected_size(self) -> int:
        return self.total_size - self.evictable_size

    # --- match and insert ------------------------------------------------------------------------
    def _split(self, node: Node, at: int, now: float) -> Node:
        """Split node's key at position ``at``; returns the new upper node."""
        assert node.parent is not None
        self.version += 1
        upper = Node(node.key[:at], node.parent, self._tick(), self.version)
        node.stamp = self.version
        upper.lock_ref = node.lock_ref
        upper.children[int(node.key[at])] = node
        node.parent.children[int(node.key[0])] = upper
        node.parent = upper
        node.kb, node.key = token_buffer(node.key[at:])
        return upper

    def match_prefix(self, key: np.ndarray, now: float, max_len: int | None = None,
                     memo: dict[int, tuple[np.ndarray, int, int]] | None = None,
                     path: list[Node] | None = None, kb: bytes | None = None) -> tuple[int, Node]:
        """Longest cached prefix of key (at most max_len tokens): (length, last matched node). ``memo`` (one per
        key, kept by the caller) remembers each comparison with a node's key at an offset: a key array is never
        changed in place (a split gives both parts new arrays), so the same array at the same offset compares the
        same; the memo holds the array, so its id cannot be reused while remembered. ``path`` collects the nodes
        the match touched, in order (``touch``). ``kb``: the key's bytes where the caller keeps them (a key cut to
        max_len may be given the bytes of the whole)."""
        if kb is None:
            kb = token_bytes(key)
        if max_len is not None:
            key = key[:max_len]
        node, n = self.root, 0
        node.touched = self._tick()
        if path is not None:
            path.append(node)
        while n < len(key):
            child = node.children.get(int(key[n]))
            if child is None:
                break
            ck = child.key
            seen = memo.get(id(ck)) if memo is not None else None
            if seen is not None and seen[0] is ck and seen[1] == n:
                m = seen[2]
            else:
                m = common_prefix_at(ck, child.kb, key, kb, n)
                if memo is not None:
                    memo[id(ck)] = (ck, n, m)
            if m < len(child.key):               # the new upper node is fresh; the lower keeps its time
                node = self._split(child, m, now)
                n += m
                break
            child.touched = self._tick()
            if path is not None:
                path.append(child)
            n += m
            node = child
        return n, node

    def touch(self, path: list[Node]) -> None:
        """What a match that made no node touches, again: the same nodes in the same order (while ``version``
        is unchanged the same key matches along the same path)."""
        for nd in path:
            self._clock += 1
            nd.touched = self._clock

    @staticmethod
    def path_unchanged(path: list[Node], stamps: list[int], next_token: int | None) -> bool:
        """Whether a match that walked ``path`` (stamps as they were) and stopped before ``next_token`` (None: the
        key ended) would walk it again with the same result."""
        return ((next_token is None or next_token not in path[-1].children)
                and all(nd.stamp == st for nd, st in zip(path, stamps, strict=True)))

    def insert(self, key: np.ndarray, now: float, path: list[Node] | None = None) -> int:
        """Insert key; returns how many leading tokens were already present. ``path`` collects the nodes from the
        root to the one ending at len(key): the nodes a match of key would touch next, in order (``touch``)."""
        kb = token_bytes(key)
        node, n = self.root, 0
        node.touched = self._tick()
        if path is not None:
            path.append(node)
        while n < len(key):
            child = node.children.get(int(key[n]))
            if child is None:
                break
            m = common_prefix_at(child.key, child.kb, key, kb, n)
            if m < len(child.key):
                child = self._split(child, m, now)
            child.touched = self._tick()
            if path is not None:
                path.append(child)
            n += m
            node = child
        if n < len(key):
            self.version += 1
            leaf = Node(key[n:], node, self._tick(), self.version)
            if not node.children:
                self._leaves.pop(node, None)
            node.children[int(key[n])] = leaf
            self._leaves[leaf] = None
            self.total_size += len(key) - n
            self.evictable_size += len(key) - n
            if path is not None:
                path.append(leaf)
        return n

    def node_for(self, key: np.ndarray, now: float) -> Node:
        """The node ending exactly at len(key) (key must be fully present)."""
        n, node = self.match_prefix(key, now)
        assert n == len(key), "node_for: key not fully cached"
        return node

    # --- locks -----------------------------------------------------------------------------------
    def inc_lock_ref(self, node: Node) -> int:
        """Lock the path root→node; returns the number of tokens that stopped being evictable."""
        delta = 0
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                delta += len(node.key)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent
        return delta

    def dec_lock_ref(self, node: Node) -> int:
        delta = 0
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            assert node.lock_ref >= 0, "lock_ref below zero"
            assert node.parent is not None
            node = node.parent
        return delta

    # --- eviction --------------------------------------------------------------------------------
    def evict(self, n_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until ≥ n_tokens are freed. Returns freed."""
        if n_tokens <= 0 or self.evictable_size == 0:
            return 0
        heap = [(nd.touched, nd) for nd in self._leaves if nd.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < n_tokens and heap:
            _, nd = heapq.heappop(heap)
            parent = nd.parent
            assert parent is not None
            self.version += 1
            nd.stamp = self.version
            del parent.children[int(nd.key[0])]
            del self._leaves[nd]
            freed += len(nd.key)
            self.total_size -= len(nd.key)
            self.evictable_size -= len(nd.key)
            if parent is not self.root and not parent.children:
                self._leaves[parent] = None
                if parent.lock_ref == 0:
                    heapq.heappush(heap, (parent.touched, parent))
        return freed

    # --- contract --------------------------------------------------------------------------------
    def check_integrity(self) -> None:
        total = evictable = 0
        stack = [self.root]
        while stack:
            nd = stack.pop()
            for first, ch in nd.children.items():
                assert ch.parent is nd, "broken parent link"
                assert len(ch.key) > 0 and int(ch.key[0]) == first, "child keyed by a wrong first token"
                assert ch.kb == ch.key.tobytes(), "a node's key bytes out of date"
                assert ch.lock_ref >= 0, "negative lock_ref"
                assert ch.lock_ref <= nd.lock_ref or nd is self.root, "child locked more than its parent"
                total += len(ch.key)
                evictable += len(ch.key) if ch.lock_ref == 0 else 0
                stack.append(ch)
        assert total == self.total_size, f"tree holds {total} tokens, counter says {self.total_size}"
        leaves = [nd for nd in descendants(self.root) if nd is not self.root and not nd.children]
        assert set(leaves) == set(self._leaves) and len(leaves) == len(self._leaves), "leaf index out of date"
        assert evictable == self.evictable_size, f"evictable {evictable} != counter {self.evictable_size}"
