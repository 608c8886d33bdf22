// The drawn elements as a small graph store: ids -> attributes and the edges between them. It
// answers what the view and its tests ask (nodes, filterNodes, hasNode, attributes, order,
// size) without a general graph library (graphology cost ~1 s per 10k nodes to fill).
// `load` takes a whole drawing at once and builds nothing up front: the id index, the
// attribute objects and the edge set are made on first use, so a 20k-node graph's first frame
// does not wait for 20k objects and 24k string keys it does not need.
export class Elements {
  constructor() { this.clear(); }

  clear() {
    this.ids = [];
    this._attrOf = null;     // index -> attribute object (made on demand)
    this._attrs = [];
    this._index = null;      // id -> index
    this._pairs = null;      // edges as index pairs (s0, t0, s1, t1, ...)
    this._edgeKeys = null;   // s * n + t of every distinct edge
  }

  /** The elements of one drawing: `ids`, `attrOf(i)` making element i's attributes and
   * `pairs`, the edges as consecutive (source, target) element indices. */
  load(ids, attrOf, pairs) {
    this.clear();
    this.ids = ids;
    this._attrOf = attrOf;
    this._attrs = new Array(ids.length);
    this._pairs = pairs;
  }

  get index() {
    if (this._index === null) {
      const m = new Map();
      for (let i = 0; i < this.ids.length; i++) m.set(this.ids[i], i);
      this._index = m;
    }
    return this._index;
  }

  get order() { return this.ids.length; }
  get size() { return this.edgeKeys().size; }

  edgeKeys() {
    if (this._edgeKeys === null) {
      const keys = new Set(), n = this.ids.length, p = this._pairs || [];
      for (let k = 0; k + 1 < p.length; k += 2) keys.add(p[k] * n + p[k + 1]);
      this._edgeKeys = keys;
    }
    return this._edgeKeys;
  }

  addNode(id, attrs) {
    this.index.set(id, this.ids.length);
    this.ids.push(id);
    this._attrs.push(attrs);
  }

  addEdge(s, t) {
    const i = this.index.get(s), j = this.index.get(t);
    if (i !== undefined && j !== undefined) this.edgeKeys().add(i * this.ids.length + j);
  }

  hasEdge(s, t) {
    const i = this.index.get(s), j = this.index.get(t);
    return i !== undefined && j !== undefined && this.edgeKeys().has(i * this.ids.length + j);
  }

  hasNode(id) { return this.index.has(id); }
  nodes() { return this.ids.slice(); }

  attrs(i) {
    let a = this._attrs[i];
    if (a === undefined) a = this._attrs[i] = this._attrOf ? this._attrOf(i) : {};
    return a;
  }

  getNodeAttributes(id) { return this.attrs(this.index.get(id)); }
  getNodeAttribute(id, key) { return this.attrs(this.index.get(id))[key]; }

  filterNodes(fn) {
    const out = [];
    for (let i = 0; i < this.ids.length; i++) if (fn(this.ids[i], this.attrs(i))) out.push(this.ids[i]);
    return out;
  }

  forEachNode(fn) { for (let i = 0; i < this.ids.length; i++) fn(this.ids[i], this.attrs(i)); }
}
