"""The bottom layer: the errors users see (one line each) and atomic, never-destructive outputs. Every other
package may import it; it imports nothing of ours."""
