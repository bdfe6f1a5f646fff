package accounting

import (
	"reflect"
	"testing"
)

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
		r.Add(&TaskSample{ID: id})
	}
	if got, want := ringIDs(r), []uint64{2, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for id := uint64(3); id <= 7; id++ {
		r.Add(&TaskSample{ID: id})
	}
	if got, want := ringIDs(r), []uint64{7, 6, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if r.Len() != 3 || r.Cap() != 3 || r.Total() != 7 {
		t.Errorf("Len %d Cap %d Total %d", r.Len(), r.Cap(), r.Total())
	}
	if NewRing(0).Cap() != DefaultRingSize {
		t.Errorf("default size %d", NewRing(0).Cap())
	}
}

func TestRingStoresCopies(t *testing.T) {
	r := NewRing(2)
	s := TaskSample{ID: 1, Route: "GET /"}
	r.Add(&s)
	s.ID, s.Route = 2, "changed"
	if got := r.Snapshot()[0]; got.ID != 1 || got.Route != "GET /" {
		t.Errorf("ring holds %+v, want the copy taken at Add", got)
	}
}
