// Render-scoped cycle collector (see gc.h).
#include "model/jinja/gc.h"

#include <algorithm>

#include "model/jinja/interpreter.h"

namespace kiln::jinja {

namespace {

thread_local GcHeap* t_current = nullptr;

// Reports the strong references node n holds.
void trace(GcKind kind, void* ptr, GcVisitor& v) {
  switch (kind) {
    case GcKind::List:
      v.values(*static_cast<ValueList*>(ptr));
      break;
    case GcKind::Dict:
      for (const auto& [key, value] : static_cast<Dict*>(ptr)->entries()) {
        v.value(key);
        v.value(value);
      }
      break;
    case GcKind::Iter:
      v.values(static_cast<IterState*>(ptr)->items);
      break;
    case GcKind::Callable:
      static_cast<Callable*>(ptr)->gc_trace(v);
      break;
    case GcKind::Object:
      static_cast<Object*>(ptr)->gc_trace(v);
      break;
    case GcKind::Frame: {
      const auto* f = static_cast<Frame*>(ptr);
      v.frame(f->parent);
      for (const auto& [name, value] : f->vars) v.value(value);
      break;
    }
  }
}

// Drops every reference node n holds (n is garbage: nothing outside can see it).
void clear(GcKind kind, void* ptr) {
  switch (kind) {
    case GcKind::List:
      ValueList().swap(*static_cast<ValueList*>(ptr));
      break;
    case GcKind::Dict:
      static_cast<Dict*>(ptr)->clear();
      break;
    case GcKind::Iter:
      ValueList().swap(static_cast<IterState*>(ptr)->items);
      break;
    case GcKind::Callable:
      static_cast<Callable*>(ptr)->gc_clear();
      break;
    case GcKind::Object:
      static_cast<Object*>(ptr)->gc_clear();
      break;
    case GcKind::Frame: {
      auto* f = static_cast<Frame*>(ptr);
      f->vars.clear();
      f->parent.reset();
      break;
    }
  }
}

}  // namespace

void GcVisitor::value(const Value& v) {
  // A Value holds at most one of these, but each one present is its own reference.
  if (const auto& p = v.list_ptr()) edge(p, GcKind::List, p.get());
  if (const auto& p = v.dict_ptr()) edge(p, GcKind::Dict, p.get());
  if (const auto& p = v.iter_ptr()) edge(p, GcKind::Iter, p.get());
  if (const auto& p = v.callable_shared()) edge(p, GcKind::Callable, p.get());
  if (const auto& p = v.object_shared()) edge(p, GcKind::Object, p.get());
}

void GcVisitor::frame(const std::shared_ptr<Frame>& f) {
  if (f) edge(f, GcKind::Frame, f.get());
}

GcHeap* GcHeap::current() { return t_current; }

GcScope::GcScope(GcHeap& heap) : previous_(t_current) { t_current = &heap; }
GcScope::~GcScope() { t_current = previous_; }

void GcHeap::compact() {
  std::erase_if(entries_, [](const Entry& e) { return e.owner.expired(); });
  std::erase_if(adopted_, [](const std::weak_ptr<const void>& w) { return w.expired(); });
  compact_at_ = std::max(kMinCompact, 2 * entries_.size());
}

void GcHeap::collect(std::shared_ptr<void> release) noexcept {
  try {
    collect_garbage(release);
  } catch (...) {
    // Out of memory while building the graph: leave the cycles rather than fail a
    // render that already finished (this runs in destructors).
  }
  entries_.clear();
  adopted_.clear();
  compact_at_ = kMinCompact;
}

void GcHeap::collect_garbage(std::shared_ptr<void>& release) {
  if (entries_.empty()) return;
  GcGraph g;
  g.index.reserve(2 * entries_.size());
  for (const auto& e : entries_) {
    if (auto p = e.owner.lock()) g.node(p, e.id, e.kind, e.ptr);
  }
  release.reset();
  const std::size_t registered = g.nodes.size();
  entries_.clear();
  adopted_.clear();

  // Trace every node, adding the objects it references (frames, the caller's
  // containers, ...) as nodes too, so that the graph is closed under references.
  // Tracing copies no shared_ptr except the one strong reference g keeps per node.
  std::vector<std::size_t> offsets;
  GcVisitor visitor(g);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    offsets.push_back(g.edges.size());
    const GcKind kind = g.nodes[i].kind;  // g.nodes may grow while tracing
    trace(kind, g.nodes[i].ptr, visitor);
  }
  offsets.push_back(g.edges.size());
  const std::size_t n = g.nodes.size();

  // External references: the use count less the one g holds and the references
  // from other nodes of the graph.
  std::vector<long> external(n);
  for (std::size_t i = 0; i < n; ++i) external[i] = g.nodes[i].owner.use_count() - 1;
  for (std::size_t target : g.edges) --external[target];

  // Live: referenced from outside, or reachable from something that is.
  std::vector<char> live(n, 0);
  std::vector<std::size_t> stack;
  for (std::size_t i = 0; i < n; ++i) {
    if (external[i] > 0) {
      live[i] = 1;
      stack.push_back(i);
    }
  }
  while (!stack.empty()) {
    std::size_t i = stack.back();
    stack.pop_back();
    for (std::size_t e = offsets[i]; e < offsets[i + 1]; ++e) {
      std::size_t t = g.edges[e];
      if (!live[t]) {
        live[t] = 1;
        stack.push_back(t);
      }
    }
  }

  // Clear the garbage while g still holds every node, so that clearing one node
  // cannot destroy another that is yet to be cleared; dropping g then frees it.
  // Only what this render registered is written to: every cycle it built runs
  // through such an object (one it created or mutated, or a macro's or loop's frame
  // reached from one), so clearing those breaks them all, while objects it merely
  // found (the caller's, which other threads may be reading, and frames of other
  // renders) are left alone.
  for (std::size_t i = 0; i < registered; ++i)
    if (!live[i]) clear(g.nodes[i].kind, g.nodes[i].ptr);

  // A render nested in another (a C++ callable rendering a template) hands what
  // survives to the enclosing render, whose values it may have become part of.
  if (GcHeap* outer = t_current; outer && outer != this) {
    for (std::size_t i = 0; i < registered; ++i) {
      const auto& node = g.nodes[i];
      if (live[i]) outer->entries_.push_back(Entry{node.owner, node.id, node.kind, node.ptr});
    }
  }
}

void gc_track(const std::shared_ptr<ValueList>& p) {
  if (GcHeap* h = t_current) h->add(p, GcKind::List, p.get());
}
void gc_track(const std::shared_ptr<Dict>& p) {
  if (GcHeap* h = t_current) h->add(p, GcKind::Dict, p.get());
}
void gc_track(const std::shared_ptr<IterState>& p) {
  if (GcHeap* h = t_current) h->add(p, GcKind::Iter, p.get());
}
void gc_track(const std::shared_ptr<Callable>& p) {
  if (GcHeap* h = t_current) h->add(p, GcKind::Callable, p.get());
}
void gc_track(const std::shared_ptr<Object>& p) {
  if (GcHeap* h = t_current) h->add(p, GcKind::Object, p.get());
}

void gc_adopt(const Value& v) {
  GcHeap* h = t_current;
  if (!h) return;
  if (const auto& p = v.list_ptr()) h->adopt(p, GcKind::List, p.get());
  if (const auto& p = v.dict_ptr()) h->adopt(p, GcKind::Dict, p.get());
}

}  // namespace kiln::jinja
