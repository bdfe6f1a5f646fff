// Package directory says which node of a baton cluster owns which room, and where a new
// room should go.
//
// A node (one baton process) opens a [Directory] handle on a backend: [Embedded], in
// memory, for one process and no set-up (the default), or the etcd backend of the nested
// module github.com/batonrt/baton/directory/etcd for many processes and machines. The
// handle holds one lease: the node's record (addresses, loops, draining flag, load) and
// every room the node claims live under it, and all of them vanish together when the lease
// lapses. The node renews the lease by calling [Directory.KeepAlive] (baton drives it from
// a loop background task, so a node whose loop stops turning stops renewing).
//
// A claim's revision is the room's fencing token ([Token]): it strictly increases for a
// room across owners, so a side effect that carries its room's token can be refused once a
// newer owner exists. Before each tick a room asks [Directory.Valid], a local check by the
// monotonic clock (the lease's deadline minus a safety margin, see [Lease]) that needs no
// round trip and turns false before the backend can free the room.
//
// [Choose] places a new room on the node with the most headroom by load, never on a
// draining node; [SeatSigner] signs and checks the seat tokens that route a player to the
// room's owner. Package directorytest holds the conformance suite every backend passes.
// docs/cluster.md describes the design.
//
// Every type of this package is safe for concurrent use by any goroutine; the doc of each
// method says whether it blocks (a backend round trip) so that loop code offloads it.
package directory
