"""The multi-tenant radix tree of SGLang's cache-aware router (sglang-router 0.3.2 = lightseekorg/smg@c7f9bf9f,
``src/policies/tree.rs``): one tree of every prompt the router sent; each node knows which workers (tenants)
it sent that text to, and when (a global epoch); each tenant's size is the text it owns.

The real tree's edges are characters of the request text; this one's are token ids (a stated approximation:
a match rate over tokens stands for the match rate over characters, and sizes are converted with
``token_chars`` where the router's limit is in characters). Eviction pops each over-size tenant's least
recently used leaves until it fits, as ``Tree::evict_tenant_by_size`` does.
"""

from __future__ import annotations

import heapq

import numpy as np

from simulator.kernels import common_prefix_at, token_buffer, token_bytes
from simulator.trees import descendants


class Node:
    __slots__ = ("edge", "eb", "children", "parent", "tenants", "last_tenant")

    def __init__(self, edge: np.ndarray, parent: Node | None):
        self.eb, self.edge = token_buffer(edge)     # its bytes (kernels.common_prefix_at), read as tokens
        self.children: dict[int, Node] = {}
        self.parent = parent
        self.tenants: dict[int, int] = {}     # tenant → epoch of its last insert through this node
        self.last_tenant = -1


class TenantTree:
    def __init__(self, n_tenants: int):
        self.root = Node(np.zeros(0, np.int32), None)
        self.size = [0] * n_tenants            # tokens owned per tenant
        self.epoch = 0

    def match(self, tokens: np.ndarray) -> tuple[int, int]:
        """(matched tokens, a tenant of the deepest node reached, or -1): partial edges count, as in
        ``prefix_match_tenant``; the tenant is the node's most recent one."""
        node, i, n = self.root, 0, int(tokens.shape[0])
        tb = token_bytes(tokens)
        while i < n:
            child = node.children.get(int(tokens[i]))
            if child is None:
                break
            step = common_prefix_at(child.edge, child.eb, tokens, tb, i)
            i += step
            node = child
            if step < child.edge.shape[0]:
                break
        return i, (node.last_tenant if node is not self.root else -1)

    def insert(self, tokens: np.ndarray, tenant: int) -> None:
        self.epoch += 1
        node, i, n = self.root, 0, int(tokens.shape[0])
        tb = token_bytes(tokens)
        while i < n:
            child = node.children.get(int(tokens[i]))
            if child is None:
                leaf = Node(tokens[i:], node)
                node.children[int(tokens[i])] = leaf
                self._own(leaf, tenant)
                return
            step = common_prefix_at(child.edge, child.eb, tokens, tb, i)
            if step < child.edge.shape[0]:
                child = self._split(node, child, step)
            i += step
            node = child
            self._own(node, tenant)

    def _own(self, node: Node, tenant: int) -> None:
        if tenant not in node.tenants:
            self.size[tenant] += int(node.edge.shape[0])
        node.tenants[tenant] = self.epoch
        node.last_tenant = tenant

    def _split(self, parent: Node, child: Node, at: int) -> Node:
        mid = Node(child.edge[:at], parent)
        mid.tenants = dict(child.tenants)
        mid.last_tenant = child.last_tenant
        parent.children[int(child.edge[0])] = mid
        child.eb, child.edge = token_buffer(child.edge[at:])
        child.parent = mid
        mid.children[int(child.edge[0])] = child
        return mid

    def evict(self, tenant: int, max_tokens: int) -> None:
        """Remove ``tenant`` from its least recently used leaves until it owns at most ``max_tokens``."""
        if self.size[tenant] <= max_tokens:
            return
        heap = [(n.tenants[tenant], id(n), n) for n in descendants(self.root) if tenant in n.tenants
                and not any(tenant in c.tenants for c in n.children.values())]
        heapq.heapify(heap)
        while heap and self.size[tenant] > max_tokens:
            _, _, node = heapq.heappop(heap)
            del node.tenants[tenant]
            self.size[tenant] -= int(node.edge.shape[0])
            if node.last_tenant == tenant:
                node.last_tenant = next(iter(node.tenants), -1)
            parent = node.parent
            if not node.tenants and not node.children and parent is not None:
                del parent.children[int(node.edge[0])]
            if (parent is not None and parent is not self.root and tenant in parent.tenants
                    and not any(tenant in c.tenants for c in parent.children.values())):
                heapq.heappush(heap, (parent.tenants[tenant], id(parent), parent))

    def check_integrity(self) -> None:
        size = [0] * len(self.size)
        for n in descendants(self.root):
            if n is self.root:
                continue
            assert n.edge.shape[0] > 0, "an empty edge below the root"
            assert n.eb == n.edge.tobytes(), "an edge's bytes out of date"
            assert n.parent is not None and n.parent.children.get(int(n.edge[0])) is n, "parent link broken"
            for t in n.tenants:
                size[t] += int(n.edge.shape[0])
                assert n.parent is self.root or t in n.parent.tenants, "a tenant owns a node but not its parent"
            assert n.tenants or n.children, "a node nobody owns is kept"
        assert size == self.size, f"tenant sizes {self.size} differ from the tree's {size}"
