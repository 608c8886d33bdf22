// The drawn elements as a small graph store: ids -> attributes and the edges between them. It
// answers what the view and its tests ask (nodes, filterNodes, hasNode, attributes, order,
// size) without a general graph library (graphology cost ~1 s per 10k nodes to fill).
export class Elements {
  constructor() { this.clear(); }

  clear() {
    this.ids = [];
    this.attrs = [];
    this.index = new Map();
    this.edgeKeys = new Set();
  }

  get order() { return this.ids.length; }
  get size() { return this.edgeKeys.size; }

  addNode(id, attrs) {
    this.index.set(id, this.ids.length);
    this.ids.push(id);
    this.attrs.push(attrs);
  }

  addEdge(s, t) { this.edgeKeys.add(s + "\u0000" + t); }
  hasEdge(s, t) { return this.edgeKeys.has(s + "\u0000" + t); }
  hasNode(id) { return this.index.has(id); }
  nodes() { return this.ids.slice(); }
  getNodeAttributes(id) { return this.attrs[this.index.get(id)]; }
  getNodeAttribute(id, key) { return this.attrs[this.index.get(id)][key]; }

  filterNodes(fn) {
    const out = [];
    for (let i = 0; i < this.ids.length; i++) if (fn(this.ids[i], this.attrs[i])) out.push(this.ids[i]);
    return out;
  }

  forEachNode(fn) { for (let i = 0; i < this.ids.length; i++) fn(this.ids[i], this.attrs[i]); }
}
