"""NoC topologies (2D mesh, ring, linear) as networkx graphs, with deterministic routing.

Nodes are integers ``0..N-1`` laid out row-major: node ``i`` sits at ``x = i % width``,
``y = i // width`` (the NPU device names them ``core0``..``core{N-1}``).  Every physical
connection between two neighbouring routers is a pair of *directed* links ``(u, v)`` and
``(v, u)``, one per direction, each carrying one flit per cycle.

Routing is deterministic and minimal:

* **mesh** – XY dimension-order routing: move along X until the column matches, then
  along Y.  Its channel dependency graph is acyclic, so acquiring links in path order
  cannot deadlock (Dally & Towles, ch. 14).
* **ring** – shortest direction; a tie (distance exactly N/2) goes in the direction of
  increasing index.  Wrap-around makes the channel dependency graph of each direction a
  cycle, so each direction has a *dateline* link (``N-1 -> 0`` going up, ``0 -> N-1``
  going down); see :meth:`NocTopology.dateline_links` for how the NoC breaks the cycle.
* **linear** – the only path along the line (acyclic).
"""

from __future__ import annotations

from functools import lru_cache

import networkx as nx

TOPOLOGIES = ("mesh", "ring", "linear")


class NocTopology:
    """A directed router graph plus its routing function.

    Args:
        kind: ``"mesh"``, ``"ring"`` or ``"linear"``.
        width: nodes per row of the physical layout (the mesh's X size).
        height: number of rows (the mesh's Y size).  Ring and linear topologies connect
            the ``width * height`` nodes in index order.
    """

    def __init__(self, kind: str, width: int, height: int):
        if kind not in TOPOLOGIES:
            raise ValueError(f"unknown NoC topology {kind!r}; known: {', '.join(TOPOLOGIES)}")
        if width < 1 or height < 1:
            raise ValueError(f"NoC needs width >= 1 and height >= 1, got {width}x{height}")
        self.kind = kind
        self.width = width
        self.height = height
        self.num_nodes = width * height
        if kind == "ring" and self.num_nodes < 3:
            raise ValueError(f"a ring needs at least 3 nodes, got {self.num_nodes}")
        self.graph = self._build_graph()
        #: Every directed link, sorted, and its index (used for per-link state arrays).
        self.links: list[tuple[int, int]] = sorted(self.graph.edges())
        self.link_index: dict[tuple[int, int], int] = {l: i for i, l in enumerate(self.links)}
        # Routes are pure functions of (src, dst): cache them per instance.
        self.path = lru_cache(maxsize=None)(self._path)  # type: ignore[method-assign]

    # -- construction --------------------------------------------------------------
    def _build_graph(self) -> nx.DiGraph:
        n = self.num_nodes
        if self.kind == "mesh":
            grid = nx.grid_2d_graph(self.width, self.height)  # nodes are (x, y)
            undirected = nx.relabel_nodes(grid, {(x, y): y * self.width + x for x, y in grid})
        elif self.kind == "ring":
            undirected = nx.cycle_graph(n)
        else:
            undirected = nx.path_graph(n)
        graph = nx.DiGraph(undirected.to_directed())
        graph.add_nodes_from(range(n))  # a 1-node network still has its router
        for node in graph.nodes:
            graph.nodes[node]["pos"] = self.coords(node)
        return graph

    # -- geometry ------------------------------------------------------------------
    def coords(self, node: int) -> tuple[int, int]:
        """Physical ``(x, y)`` of ``node`` (row-major layout)."""
        return node % self.width, node // self.width

    def node_at(self, x: int, y: int) -> int:
        """Node index at physical position ``(x, y)``."""
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise ValueError(f"position ({x}, {y}) is outside the {self.width}x{self.height} NoC")
        return y * self.width + x

    def dateline_links(self) -> frozenset[tuple[int, int]]:
        """Links where a packet gets a whole-packet buffer before it may enter.

        Only rings have them: ``(N-1, 0)`` and ``(0, N-1)``.  A packet waiting for a
        dateline link holds no upstream link (it is fully buffered in the router before
        the dateline, as a dateline virtual channel would hold it), which removes one
        edge from each direction's cyclic channel dependency graph and so makes hold-and-
        wait link acquisition deadlock-free.
        """
        if self.kind != "ring":
            return frozenset()
        last = self.num_nodes - 1
        return frozenset({(last, 0), (0, last)})

    # -- routing -------------------------------------------------------------------
    def _path(self, src: int, dst: int) -> tuple[int, ...]:
        """Nodes visited from ``src`` to ``dst`` inclusive (see the module docstring)."""
        if self.kind == "mesh":
            (sx, sy), (dx, dy) = self.coords(src), self.coords(dst)
            nodes = [src]
            x, y = sx, sy
            while x != dx:  # X first ...
                x += 1 if dx > x else -1
                nodes.append(self.node_at(x, y))
            while y != dy:  # ... then Y
                y += 1 if dy > y else -1
                nodes.append(self.node_at(x, y))
        elif self.kind == "ring":
            n = self.num_nodes
            up = (dst - src) % n
            step = 1 if up <= n - up else -1  # tie (up == n/2) goes up
            count = up if step == 1 else n - up
            nodes = [(src + step * k) % n for k in range(count + 1)]
        else:
            step = 1 if dst >= src else -1
            nodes = list(range(src, dst + step, step))
        for u, v in zip(nodes, nodes[1:]):  # the routing function must follow real links
            assert self.graph.has_edge(u, v), f"route {src}->{dst} uses missing link {u}->{v}"
        return tuple(nodes)

    def route(self, src: int, dst: int) -> list[tuple[int, int]]:
        """Directed links from ``src`` to ``dst`` in traversal order (empty if equal)."""
        nodes = self.path(src, dst)
        return list(zip(nodes, nodes[1:]))

    def hops(self, src: int, dst: int) -> int:
        """Number of router-to-router links between ``src`` and ``dst``."""
        return len(self.path(src, dst)) - 1

    def average_hops(self) -> float:
        """Mean hop count over all ordered (src, dst) pairs, including src == dst
        (the uniform-random traffic convention of BookSim)."""
        n = self.num_nodes
        return sum(self.hops(s, d) for s in range(n) for d in range(n)) / (n * n)
