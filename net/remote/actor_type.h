#pragma once
// Actor types: a C++ class made spawnable on any rank by name, with the methods other ranks may
// call. TROUPE_ACTOR registers one when the program or library loads.
//
//   struct Stage {
//     explicit Stage(const Config& config);
//     Tensor forward(const Tensor& x);
//     int64_t calls() const;
//   };
//   TROUPE_ACTOR(Stage(const Config&), "xlmr.stage", &Stage::forward, &Stage::calls);
//
// The first argument is the constructor spawn_on calls, written as its signature (a class name
// alone: the default constructor). A method is called by its member's name ("forward"); its
// arguments and result travel through their Codecs (net/remote/value.h), so arguments arrive as
// values (a Tensor& parameter cannot be written back). Every rank that hosts the type registers it:
// the same program on every rank does. Write TROUPE_ACTOR once, in a .cpp file.
//
// State that survives the loss of the actor's rank (a supervised actor, remote_actor.h): the class
// lists the members that make its state, and marks the methods that may be run again after a loss.
//
//   struct Ledger {
//     explicit Ledger(std::string owner);
//     int64_t deposit(int64_t amount);                 // deterministic, no outside effects
//     int64_t balance() const;
//     int64_t balance_ = 0;
//     std::vector<int64_t> entries_;
//     TROUPE_STATE(balance_, entries_)                 // what a snapshot holds (through Codecs)
//   };
//   TROUPE_ACTOR(Ledger(std::string), "bank.ledger", net::replayable(&Ledger::deposit), &Ledger::balance);
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "net/remote/value.h"

namespace troupe::net {

struct ActorType {
  struct Method {
    std::string name;
    std::function<WireValue(void* object, const WireValue& arguments)> call;  // arguments: a list
    bool replayable = false;     // net::replayable(&T::m): run again after a loss (see README)
    bool changes_state = true;   // false for a const member function
  };
  std::string name;
  std::function<std::shared_ptr<void>(const WireValue& arguments)> construct;
  // Moves an object's state to a device (its to(Device)); empty when the class has none.
  std::function<void(void* object, Device device)> move_to;
  std::vector<Method> methods;
  // TROUPE_STATE: a call answered with the listed members as a list of Values, and their
  // restore from it; empty when the class has none.
  std::optional<Method> snapshot;
  std::function<void(void* object, const WireValue& state)> restore;

  const Method* method(std::string_view name) const;  // nullptr: none
  std::string method_names() const;                   // "forward, calls"
};

void register_actor_type(ActorType type);  // ValueError when the name is taken
const ActorType* find_actor_type(std::string_view name);  // nullptr: none
std::string actor_type_names();                          // "counter, xlmr.stage"

namespace detail {

template <class Constructor>
struct ConstructorOf {  // a class name alone
  using type = Constructor;
  using arguments = std::tuple<>;
};
template <class T, class... A>
struct ConstructorOf<T(A...)> {
  using type = T;
  using arguments = std::tuple<std::remove_cvref_t<A>...>;
};

template <class M>
struct MethodOf;
template <class R, class C, class... A>
struct MethodOf<R (C::*)(A...)> {
  using object = C;
  using result = R;
  using arguments = std::tuple<std::remove_cvref_t<A>...>;
  static constexpr bool is_const = false;
};
template <class R, class C, class... A>
struct MethodOf<R (C::*)(A...) const> : MethodOf<R (C::*)(A...)> {
  static constexpr bool is_const = true;
};
template <class R, class C, class... A>
struct MethodOf<R (C::*)(A...) noexcept> : MethodOf<R (C::*)(A...)> {};
template <class R, class C, class... A>
struct MethodOf<R (C::*)(A...) const noexcept> : MethodOf<R (C::*)(A...) const> {};

template <class... A>
std::tuple<A...> decode_arguments(const WireValue& arguments, std::tuple<A...>*) {
  return decode_tuple<A...>(arguments, "argument");
}

// "&Stage::forward, &Stage::calls" -> {"forward", "calls"}: the names TROUPE_ACTOR's methods answer to.
std::vector<std::string> member_names(const char* member_pointers);

template <class T, class M>
ActorType::Method bind_method(std::string name, M method) {
  using Of = MethodOf<M>;
  ActorType::Method bound{std::move(name), [method](void* object, const WireValue& arguments) -> WireValue {
            auto decoded = decode_arguments(arguments, static_cast<typename Of::arguments*>(nullptr));
            auto invoke = [&](auto&&... a) -> decltype(auto) {
              return (static_cast<T*>(object)->*method)(std::move(a)...);
            };
            if constexpr (std::is_void_v<typename Of::result>) {
              std::apply(invoke, std::move(decoded));
              return WireValue();
            } else {
              return to_value(std::apply(invoke, std::move(decoded)));
            }
          }};
  bound.changes_state = !Of::is_const;
  return bound;
}

template <class M>
struct Replayable {
  M member;
};

template <class T, class M>
ActorType::Method bind_method(std::string name, Replayable<M> method) {
  ActorType::Method bound = bind_method<T>(std::move(name), method.member);
  bound.replayable = true;
  return bound;
}

// TROUPE_STATE befriends it, so that the members it lists may be private.
struct StateAccess {
  template <class T>
  static constexpr bool declared = requires(T& t) { t.troupe_state(); };
  template <class T>
  static auto members(T& t) {
    return t.troupe_state();
  }
};

template <class... F>
void restore_state(std::tuple<F&...> members, const WireValue& state) {
  members = decode_tuple<std::remove_cvref_t<F>...>(state, "state member");
}

template <class Constructor>
struct ActorTypeRegistrar {
  template <class... M>
  ActorTypeRegistrar(const char* name, const char* member_pointers, M... methods) {
    using T = typename ConstructorOf<Constructor>::type;
    using Arguments = typename ConstructorOf<Constructor>::arguments;
    ActorType type;
    type.name = name;
    type.construct = [](const WireValue& arguments) -> std::shared_ptr<void> {
      return std::apply([](auto&&... a) { return std::make_shared<T>(std::move(a)...); },
                        decode_arguments(arguments, static_cast<Arguments*>(nullptr)));
    };
    if constexpr (StateAccess::declared<T>) {
      type.snapshot = ActorType::Method{"snapshot", [](void* object, const WireValue&) {
                                          return encode_tuple(StateAccess::members(*static_cast<T*>(object)));
                                        }, /*replayable=*/true, /*changes_state=*/false};
      type.restore = [](void* object, const WireValue& state) {
        restore_state(StateAccess::members(*static_cast<T*>(object)), state);
      };
    }
    if constexpr (requires(T& t) { t.to(Device::cpu()); })
      type.move_to = [](void* object, Device device) { static_cast<T*>(object)->to(device); };
    const std::vector<std::string> names = member_names(member_pointers);
    size_t i = 0;
    (type.methods.push_back(bind_method<T>(names.at(i++), methods)), ...);
    register_actor_type(std::move(type));
  }
};

}  // namespace detail

// Marks a method of TROUPE_ACTOR as replayable: after its actor's rank is lost, the call runs
// again on the respawned actor (calls since the last snapshot, and calls in flight). The method
// must be deterministic given the state and its arguments, and its outside effects idempotent.
template <class M>
detail::Replayable<M> replayable(M member) {
  return {member};
}

// Inside a TROUPE_ACTOR class: the members whose values make its state, in a snapshot and in a
// respawn from it (each through its Codec: tensors, plain values, vectors, TROUPE_FIELDS structs).
// The members may be private.
#define TROUPE_STATE(...)                                 \
  friend struct ::troupe::net::detail::StateAccess;      \
  auto troupe_state() { return std::tie(__VA_ARGS__); }

#define TROUPE_ACTOR_CONCAT_(a, b) a##b
#define TROUPE_ACTOR_CONCAT(a, b) TROUPE_ACTOR_CONCAT_(a, b)
#define TROUPE_ACTOR(Constructor, name, ...)                                                  \
  static const ::troupe::net::detail::ActorTypeRegistrar<Constructor> TROUPE_ACTOR_CONCAT( \
      troupe_actor_type_, __LINE__) {                                                         \
    name, #__VA_ARGS__, __VA_ARGS__                                                           \
  }

}  // namespace troupe::net
