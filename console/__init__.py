"""The live web console (``kafkasim console``): a view of brokers, partitions (HW and LEO of
every replica), throughput, consumer groups and an event timeline, updated once a second by
Server-Sent Events; fault buttons through the chaos backends; replay of a recorded run.

``model`` is pure (snapshots in, a JSON view model out); ``live`` takes snapshots of a real
cluster; ``replay`` builds them from a history; ``faults`` injects through the backends;
``server`` is the web application.
"""
