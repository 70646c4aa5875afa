"""What a search hands the runtime: the mapping of layers onto elements, the plan file and
its schema, and the schedule compiled from a plan's CSDF application (a pure function of it).
Both the planner (hetflow.mapping) and the engines (hetflow.runtime) read it; it imports
neither."""
