// Package layout holds the test that keeps baton's package dependencies pointing one way.
package layout
