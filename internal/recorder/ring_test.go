package recorder

import (
	"reflect"
	"testing"

	"github.com/batonrt/baton/accounting"
)

// add stores s as the loop does: filled into the next slot, then committed.
func add(r *Ring, s accounting.TaskSample) {
	*r.Slot() = s
	r.Commit()
}

func ringIDs(r *Ring) []uint64 {
	var ids []uint64
	for _, s := range r.Snapshot() {
		ids = append(ids, s.ID)
	}
	return ids
}

func TestRingOrderAndBound(t *testing.T) {
	r := NewRing(3)
	if got := ringIDs(r); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for id := uint64(1); id <= 2; id++ {
		add(r, accounting.TaskSample{ID: id})
	}
	if got, want := ringIDs(r), []uint64{2, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for id := uint64(3); id <= 7; id++ {
		add(r, accounting.TaskSample{ID: id})
	}
	if got, want := ringIDs(r), []uint64{7, 6, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if r.held() != 3 || len(r.buf) != 3 || r.Total() != 7 {
		t.Errorf("held %d size %d Total %d", r.held(), len(r.buf), r.Total())
	}
	if n := len(NewRing(0).buf); n != defaultRingSize {
		t.Errorf("default size %d", n)
	}
}

func TestRingStoresCopies(t *testing.T) {
	r := NewRing(2)
	s := accounting.TaskSample{ID: 1, Route: "GET /"}
	add(r, s)
	s.ID, s.Route = 2, "changed"
	if got := r.Snapshot()[0]; got.ID != 1 || got.Route != "GET /" {
		t.Errorf("ring holds %+v, want the copy taken at Commit", got)
	}
}
