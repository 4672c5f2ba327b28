// Render-scoped cycle collector for kiln::jinja values.
//
// Values share their lists, dicts, callables and objects through std::shared_ptr, and
// a template can build reference cycles that reference counting never frees:
//   - every {% macro %}: the frame that holds the macro is the frame it closes over;
//   - a caller() or a loop object stored where its own frame can reach it
//     ({% set ns.c = caller %}, {% set ns.l = loop %});
//   - a namespace that holds itself or a list/dict/loop/cycler that leads back to it
//     ({% set ns.self = ns %}, {% set ns.l = [ns] %});
//   - a list or dict appended into itself (mutable sandbox only).
// Python frees such garbage with its cycle collector; kiln::jinja does the same, once
// per render. While a render runs, every list, tuple, dict, namespace, iterator,
// callable and object it creates is registered with the render's GcHeap, and any
// container it mutates (append, update, namespace assignment, ...) is adopted too.
// When the render's Interpreter goes away, the heap runs one trial-deletion pass
// like CPython's gc: it builds the graph of everything reachable from the registered
// objects (frames included), subtracts the references inside the graph from each
// object's use count, keeps whatever is still referenced from outside (the caller's
// values) together with everything that reaches, and clears the registered objects
// among the rest, the cyclic garbage, so that it frees itself. Every cycle a render
// builds runs through an object it created or mutated, so each gets broken; nothing
// reachable from outside is touched (values the caller still holds keep their
// contents), and nothing the render did not create or mutate is ever written to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "model/jinja/value.h"

namespace kiln::jinja {

struct Frame;

enum class GcKind : std::uint8_t { List, Dict, Iter, Callable, Object, Frame };

// One object in the reference graph: a strong reference to it, what it is, and a
// pointer of the type `kind` names (ValueList*, Dict*, IterState*, Callable*,
// Object*, Frame*).
struct GcNode {
  std::shared_ptr<void> owner;
  const void* id;  // gc_identity
  GcKind kind;
  void* ptr;
};

// Identifies a heap object by the address of its complete object, so that an object
// reached through different base classes (LoopObject as an Object and as the
// LoopContext a LoopMethod holds) is one node. (The objects here come from
// make_shared, one control block each.)
template <class T>
const void* gc_identity(const T* p) {
  if constexpr (std::is_polymorphic_v<T>) {
    return dynamic_cast<const void*>(p);
  } else {
    return p;
  }
}

// The graph a collection builds.
struct GcGraph {
  std::vector<GcNode> nodes;
  std::unordered_map<const void*, std::size_t> index;  // gc_identity -> node
  std::vector<std::size_t> edges;                      // out-edges found by the current trace

  // The node of p, added when new.
  template <class T>
  std::size_t node(const std::shared_ptr<T>& p, const void* id, GcKind kind, void* ptr) {
    auto [it, added] = index.try_emplace(id, nodes.size());
    if (added) nodes.push_back(GcNode{std::shared_ptr<void>(p), id, kind, ptr});
    return it->second;
  }
};

// Passed to Callable::gc_trace / Object::gc_trace: each call reports one strong
// reference the traced object holds (exactly the references it owns: reporting a
// reference it does not own could free live values).
class GcVisitor {
 public:
  void value(const Value& v);
  void values(const ValueList& vs) {
    for (const auto& v : vs) value(v);
  }
  void frame(const std::shared_ptr<Frame>& f);
  template <class T>
  void object(const std::shared_ptr<T>& o) {  // T derives from Object
    if (o) edge(o, GcKind::Object, static_cast<Object*>(o.get()));
  }
  template <class T>
  void callable(const std::shared_ptr<T>& c) {  // T derives from Callable
    if (c) edge(c, GcKind::Callable, static_cast<Callable*>(c.get()));
  }

 private:
  friend class GcHeap;
  explicit GcVisitor(GcGraph& graph) : graph_(graph) {}
  template <class T>
  void edge(const std::shared_ptr<T>& p, GcKind kind, void* ptr) {
    graph_.edges.push_back(graph_.node(p, gc_identity(p.get()), kind, ptr));
  }
  GcGraph& graph_;
};

// The objects one render created or mutated; collects their cyclic garbage.
class GcHeap {
 public:
  GcHeap() = default;
  ~GcHeap() { collect(); }
  GcHeap(const GcHeap&) = delete;
  GcHeap& operator=(const GcHeap&) = delete;

  // Frees the cyclic garbage among the registered objects (and what only it
  // reaches), then forgets them; when another render is running on this thread (a
  // render nested in a C++ callable), the survivors are handed to its heap. Call
  // when nothing of the render but what it returned is left; `release` is a last
  // reference the caller gives up, dropped once the collection holds what it
  // refers to (a registered object), so that what hangs off it is examined rather
  // than freed or orphaned first. Never throws.
  void collect(std::shared_ptr<void> release = nullptr) noexcept;

  template <class T>
  void add(const std::shared_ptr<T>& p, GcKind kind, void* ptr) {
    if (!p) return;
    entries_.push_back(Entry{std::weak_ptr<void>(p), gc_identity(p.get()), kind, ptr});
    if (entries_.size() >= compact_at_) compact();
  }
  // Registers a container that is about to gain references (once).
  template <class T>
  void adopt(const std::shared_ptr<T>& p, GcKind kind, void* ptr) {
    if (p && adopted_.insert(std::weak_ptr<const void>(p)).second) add(p, kind, ptr);
  }

  // The heap of the render running on this thread, or null.
  static GcHeap* current();

 private:
  friend class GcScope;
  struct Entry {
    std::weak_ptr<void> owner;
    const void* id;  // gc_identity
    GcKind kind;
    void* ptr;
  };
  void compact();
  void collect_garbage(std::shared_ptr<void>& release);

  std::vector<Entry> entries_;
  std::set<std::weak_ptr<const void>, std::owner_less<>> adopted_;
  std::size_t compact_at_ = kMinCompact;
  static constexpr std::size_t kMinCompact = 1024;
};

// Makes a heap the current one of this thread for its lifetime (one render).
class GcScope {
 public:
  explicit GcScope(GcHeap& heap);
  ~GcScope();
  GcScope(const GcScope&) = delete;
  GcScope& operator=(const GcScope&) = delete;

 private:
  GcHeap* previous_;
};

// Registration hooks used by the value factories (no-ops outside a render).
void gc_track(const std::shared_ptr<ValueList>& p);
void gc_track(const std::shared_ptr<Dict>& p);
void gc_track(const std::shared_ptr<IterState>& p);
void gc_track(const std::shared_ptr<Callable>& p);
void gc_track(const std::shared_ptr<Object>& p);
// Adopts the list or dict of v before it is mutated to hold more references, so that
// containers created before the render (the caller's) are collected when a render
// makes them cyclic and the caller has let go of them.
void gc_adopt(const Value& v);

}  // namespace kiln::jinja
